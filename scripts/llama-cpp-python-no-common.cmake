# Read by CMake at llama.cpp's own `project()` inside llama-cpp-python's build
# (CMAKE_PROJECT_llama.cpp_INCLUDE, set by scripts/llama-cpp-python.sh). llama-cpp-python forces
# llama.cpp's common library on (a CACHE FORCE in its CMakeLists.txt, which -D cannot override);
# the package neither ships nor links it (its Python loads libllama and ggml alone), and it was 61
# of the wheel's 140 build steps. Turned off here, after that FORCE and before llama.cpp reads it.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp common library: not used by llama-cpp-python" FORCE)
