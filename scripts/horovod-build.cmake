# CMake toolchain file for `make`'s Horovod builds (Makefile, HOROVOD_BUILD): Horovod's setup.py builds
# RelWithDebInfo, which its CMakeLists makes -O3 -g. The test venvs need neither the last optimization
# level nor debug information, and the build is a tenth of CI's CPU time on a 2-core machine: set as cache
# entries here, before CMake initializes them, these are the flags of every compiled file (Gloo's too).
set(CMAKE_C_FLAGS_RELWITHDEBINFO "-O1 -DNDEBUG" CACHE STRING "")
set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O1 -DNDEBUG" CACHE STRING "")
