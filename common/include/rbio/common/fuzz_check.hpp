// Shared by the libFuzzer targets (iser-opt, initiator, tgt-backend).
#pragma once

#include <cstdio>
#include <cstdlib>

// An invariant of the code under test. Not assert(): the fuzzers must check
// in every build type, and abort() is what libFuzzer records as a crash,
// with the input that caused it.
#define FUZZ_CHECK(cond)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            std::fprintf(stderr, "check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
            std::abort();                                                                  \
        }                                                                                  \
    } while (0)
