"""The named tuples that getters return: Context.memory, and Trainer's evaluate, loss_scale, progress,
memory, last_epoch_time and unfinished_epoch."""
import collections


Evaluation = collections.namedtuple("Evaluation", "loss accuracy")
LossScale = collections.namedtuple("LossScale", "scale growth_tracker skipped_steps")
Progress = collections.namedtuple("Progress", "steps epochs")
Memory = collections.namedtuple("Memory", "used peak")
TrainerMemory = collections.namedtuple("TrainerMemory", "planned allocated")
EpochTime = collections.namedtuple("EpochTime", "seconds steps")
UnfinishedEpoch = collections.namedtuple("UnfinishedEpoch", "steps rows batch_size")
