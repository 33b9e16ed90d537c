# Kernel benchmarks: binaries (not tests) that time the CUDA kernels. Included by
# tests/benchmarks/CMakeLists.txt and by the standalone kernels build; CUDA toolkit only.
add_executable(small_ops_benchmark ${CMAKE_CURRENT_LIST_DIR}/small_ops_benchmark.cc)
target_include_directories(small_ops_benchmark PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../..)
target_link_libraries(small_ops_benchmark PRIVATE flame_kernels)

# Chunk attention (chunk_simple_gla, chunk_gla, chunk_delta_rule, chunk_gated_delta_rule) at
# fla's shapes; kernels_vs_fla.py runs it.
add_executable(chunk_attention_benchmark ${CMAKE_CURRENT_LIST_DIR}/chunk_attention_benchmark.cc)
target_include_directories(chunk_attention_benchmark PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../..)
find_package(Threads REQUIRED)
target_link_libraries(chunk_attention_benchmark PRIVATE flame_kernels Threads::Threads)
