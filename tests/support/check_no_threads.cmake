# ctest script: fails when a static library of the core refers to a thread
# primitive (a mutex, a condition variable, a thread, pthreads), which a
# build without threads (FEDRT_WITH_THREADS=OFF: a Cortex-M target) may not
# have. Run with -DNM=<nm> -DLIBS=<library>|<library>|...
string(REPLACE "|" ";" libraries "${LIBS}")
set(pattern "pthread_|std::mutex|std::condition_variable|std::thread|std::__1::mutex")
foreach(library IN LISTS libraries)
  execute_process(COMMAND ${NM} -C --undefined-only ${library} OUTPUT_VARIABLE symbols RESULT_VARIABLE failed)
  if(failed)
    message(FATAL_ERROR "${NM} could not read ${library}")
  endif()
  string(REGEX MATCHALL "[^\n]*(${pattern})[^\n]*" found "${symbols}")
  if(found)
    list(JOIN found "\n" lines)
    message(FATAL_ERROR "${library} refers to thread primitives:\n${lines}")
  endif()
  message(STATUS "${library}: no thread primitive")
endforeach()
