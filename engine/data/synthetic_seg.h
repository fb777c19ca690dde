// synthetic_seg.h — a learnable segmentation task for the UNets, `--dataset synthetic-seg`.
// Each sample paints 1..max_shapes filled rectangles or discs of a random foreground class
// (1..K-1; later shapes cover earlier ones) on class-0 background. Every pixel of class k
// shows a class pattern: pattern[k][c] + amp * cos(2*pi*(fx_k*x + fy_k*y)) per channel,
// plus sigma * N(0,1) noise, so both colour and texture identify the class.
// Contracts:
//  * get(i, image, mask) writes C*H*W floats and an int64 [H, W] mask with values in
//    [0, num_classes); target_shape() = {H, W}.
//  * sample i is a pure function of (parameters, seed, i): Philox stream (seed, i * 2^32);
//    the class patterns come from a separate stream keyed by a mix of the seed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace oomlab {

class SyntheticSegmentationDataset : public Dataset {
 public:
  SyntheticSegmentationDataset(Shape chw, int64_t size, int64_t num_classes, uint64_t seed,
                               float noise_sigma = 0.5f, int64_t max_shapes = 3);

  int64_t size() const override { return size_; }
  Shape sample_shape() const override { return shape_; }
  int64_t num_classes() const override { return num_classes_; }
  Shape target_shape() const override { return {shape_[1], shape_[2]}; }
  void get(int64_t index, float* image_out, int64_t* mask_out) const override;
  std::string name() const override;

 private:
  Shape shape_;
  int64_t size_, num_classes_, max_shapes_;
  uint64_t seed_;
  float sigma_;
  std::vector<float> level_;        // num_classes x C: per-channel class colour
  std::vector<float> freq_;         // num_classes x 2: stripe frequencies (cycles/pixel)
};

}  // namespace oomlab
