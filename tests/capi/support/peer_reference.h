/* What the C++ peer trainer computes, for capi_peer_test to compare the C
 * API against: fedrt::peer::PeerTrainer over the in-process loopback
 * binding (LoopbackPeerNetwork, one thread per rank), called from C
 * (peer_reference.cc). Built where the runtime has its host bindings. */
#ifndef FEDRT_TESTS_CAPI_PEER_REFERENCE_H_
#define FEDRT_TESTS_CAPI_PEER_REFERENCE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Trains `peers` ranks of the dense ring all-reduce (PeerReduce::kDense),
 * each a model from (spec, model_seed) on the float examples i of
 * features[count x example_size] / labels[count] with i % peers == rank,
 * with plain SGD at `learning_rate`, `epochs` epochs of batches of `batch`
 * (order seed 1), and copies rank 0's final parameters into
 * out[0 .. capacity). Returns how many parameters there are, or 0 when
 * anything failed (printed on stderr). */
size_t capi_reference_peer_ring(const char* spec, uint64_t model_seed, const float* features, const uint8_t* labels,
                                size_t count, size_t example_size, int classes, uint32_t peers, int epochs, int batch,
                                double learning_rate, float* out, size_t capacity);

#ifdef __cplusplus
}
#endif

#endif /* FEDRT_TESTS_CAPI_PEER_REFERENCE_H_ */
