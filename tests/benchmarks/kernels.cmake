# Kernel benchmarks: binaries (not tests) that time the CUDA kernels. Included by
# tests/benchmarks/CMakeLists.txt and by the standalone kernels build; CUDA toolkit only.
add_executable(small_ops_benchmark ${CMAKE_CURRENT_LIST_DIR}/small_ops_benchmark.cc)
target_include_directories(small_ops_benchmark PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../..)
target_link_libraries(small_ops_benchmark PRIVATE flame_kernels)
