import subprocess
import sys
import textwrap


def test_importing_kscale_loads_neither_horovod_nor_tensorflow_estimator():
    code = textwrap.dedent(
        """
        import sys
        import kscale, kscale.estimator
        loaded = [m for m in ("horovod", "tensorflow_estimator") if m in sys.modules]
        assert not loaded, loaded
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
