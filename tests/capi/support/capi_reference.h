/* What the C++ API computes, for the C tests to compare the C API against:
 * C functions implemented in C++ (capi_reference.cc) on fedrt::Model. */
#ifndef FEDRT_TESTS_CAPI_REFERENCE_H_
#define FEDRT_TESTS_CAPI_REFERENCE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Copies the parameters fedrt::Model::Create(spec, seed) starts with into
 * out[0 .. capacity); returns how many there are, or 0 when the model cannot
 * be made or does not fit. */
size_t capi_reference_parameters(const char* spec, uint64_t seed, float* out, size_t capacity);

#ifdef __cplusplus
}
#endif

#endif /* FEDRT_TESTS_CAPI_REFERENCE_H_ */
