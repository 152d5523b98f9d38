/* The firmware's training data, in flash: the first FASHION_COUNT images of
 * the Fashion-MNIST training set and their labels, generated at build time by
 * make_data.py, and the training set's normalisation (pixel / 255 - mean) /
 * stddev, the one fedrt serve uses. */
#ifndef FEDRT_EXAMPLES_FIRMWARE_FASHION_DATA_H_
#define FEDRT_EXAMPLES_FIRMWARE_FASHION_DATA_H_

#include <stdint.h>

#define FASHION_COUNT 256
#define FASHION_PIXELS (28 * 28)
#define FASHION_CLASSES 10

extern const float kFashionMean;
extern const float kFashionStddev;
extern const uint8_t kFashionLabels[FASHION_COUNT];
extern const uint8_t kFashionPixels[FASHION_COUNT * FASHION_PIXELS];

#endif /* FEDRT_EXAMPLES_FIRMWARE_FASHION_DATA_H_ */
