# Unity batches for every target with many files: the headers a batch includes (torch's for the
# engine; nlohmann/json, the standard library and GoogleTest for the core and its tests) are parsed
# once per batch instead of once per file, most of a build's time. A developer's build keeps
# batches of five, so an edit recompiles five files; a one-shot build (a fresh clone's, setup.py's
# pip install) asks for as many batches as it runs jobs, which parses the headers once per core.
# Engine, two cores: 98 s -> 61 s. The core's 56 files: 102 s of CPU -> see bench/README.md, "The
# suite's own time". A precompiled header was measured too: its 350 MB image (torch's) costs about
# as much to load as the parse it saves.
set(MSPROBE_UNITY_BATCHES 0 CACHE STRING
    "Translation units per target compiled in unity batches (0: batches of five files)")

function(msprobe_unity_build target)
  set(batch_size 5)
  if(MSPROBE_UNITY_BATCHES GREATER 0)
    get_target_property(sources ${target} SOURCES)
    list(LENGTH sources source_count)
    math(EXPR batch_size "(${source_count} + ${MSPROBE_UNITY_BATCHES} - 1) / ${MSPROBE_UNITY_BATCHES}")
  endif()
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${batch_size})
endfunction()
