// npy_dataset.h — datasets from NumPy .npy files (`--dataset npy --data-dir DIR`), so a
// user feeds oomlab the very samples they feed PyTorch. Files of split S (train, test):
//   DIR/S_inputs.npy          images (N, C, H, W) float32 (as given), float64 (rounded to
//                             float32) or uint8 (divided by 255, as torchvision's ToTensor);
//                             or token ids (N, T) int64 / int32
//   DIR/S_labels.npy          class labels (N,) or, for images, per-pixel masks (N, H, W);
//                             any integer type, values in [0, num_classes)
//   DIR/S_attention_mask.npy  tokens only, optional: (N, T) of 0/1 (any integer or bool),
//                             Hugging Face's attention_mask; without it the mask is ids != 0
// Contracts:
//  * Token rows are right-padded: each mask row is ones then zeros with at least one one;
//    ids inside the mask are >= 1 (oomlab reserves id 0 for padding, BERT's [PAD]); ids
//    after it are ignored. Sample i's tokens are its first mask-sum ids.
//  * num_classes 0 infers max label + 1 over the given splits; a label outside
//    [0, num_classes) is an error naming the file, the sample and the value.
//  * Every problem (a missing file, wrong rank or dtype, N disagreeing between files, a
//    mask that is not right-padded, a padding id inside the mask) is an IoError or
//    ValueError naming the file and what is wrong, raised when the dataset is loaded.
//  * Sample i is row i of the files (no shuffling here; the DataLoader's order applies).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace oomlab {

// The files the splits of a dataset folder are read from: DIR/{train,test}_{inputs,labels}.npy.
std::vector<std::string> npy_dataset_files(const std::string& dir);

// DIR/<split>_inputs.npy exists (the test split is optional for `oomlab train`).
bool npy_split_exists(const std::string& dir, const std::string& split);

// Loads one split; num_classes as in the header (0 = infer from this split's labels).
std::shared_ptr<Dataset> load_npy_dataset(const std::string& dir, const std::string& split,
                                          int64_t num_classes = 0);

// The largest label + 1 of DIR/<split>_labels.npy (0 when the file has no labels).
int64_t npy_label_count(const std::string& dir, const std::string& split);

}  // namespace oomlab
