// Training checkpoints: everything needed to resume bit-exactly, in the model file format plus the
// optimizer state, the loss scaler's state, step and epoch counters, the position inside the epoch
// with its row order, the shuffle generator's state and the epoch's running metrics.
#pragma once

#include <cstdint>
#include <string>

#include "nn/trainer.h"

namespace mpt {

void save_checkpoint(Trainer& trainer, const std::string& path);
// Validates the whole file against the trainer (architecture, options, version) before changing
// anything; on success the trainer continues exactly where the checkpoint's trainer stood.
void load_checkpoint(Trainer& trainer, const std::string& path);
// The options of the trainer that wrote the checkpoint at `path`, as it ran them: its precision and
// loss scaling resolved (never AUTO or DEFAULT), the base learning rate of its next step, a micro-batch
// size of 0 (no checkpoint records one). A trainer created with them takes the checkpoint. Checks the
// options' format; their values are the C API setters' to check.
TrainerConfig read_checkpoint_options(const std::string& path);
// Writes directory/checkpoint-<step>.safetensors and removes all but the newest `keep_last`.
void write_rotating_checkpoint(Trainer& trainer, const CheckpointPolicy& policy, int64_t step);

}  // namespace mpt
