# tpserve_shard_plan: which slice of each weight a tensor-parallel rank owns.
tpserve_library(tpserve_shard_plan ${CMAKE_CURRENT_SOURCE_DIR}/shard_plan.cc)
tpserve_link(tpserve_shard_plan tpserve_weights)
tpserve_test(shard_plan_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/shard_plan_test.cc
             LIBS tpserve_shard_plan)
