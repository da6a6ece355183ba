// What the host spends on each step that replays a CUDA graph: the task's own issuing (the
// executor's ops recorded, the signature built and looked up) and the cudaGraphLaunch call. The
// GPU runs a step's graph in tens of microseconds at small batches; were the host's part longer, the
// GPU would wait for it between steps, and no kernel work could shorten the step. The launch's
// shortest time is its cost when the GPU's queue has room; its mean also holds the times it waited
// for a full queue (the host running ahead of the GPU, as it should). Plain C++, no CUDA.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

namespace mpt {

class ReplayHostTime {
public:
    // One replayed task: `issue_ns` from the task's start to its launch, `launch_ns` in the launch.
    void add(int64_t issue_ns, int64_t launch_ns) {
        ++tasks_;
        issue_ns_ += issue_ns;
        launch_ns_ += launch_ns;
        shortest_launch_ns_ = std::min(shortest_launch_ns_, launch_ns);
    }

    uint64_t tasks() const { return tasks_; }
    int64_t mean_issue_ns() const { return tasks_ ? issue_ns_ / static_cast<int64_t>(tasks_) : 0; }
    int64_t mean_launch_ns() const { return tasks_ ? launch_ns_ / static_cast<int64_t>(tasks_) : 0; }
    int64_t shortest_launch_ns() const { return tasks_ ? shortest_launch_ns_ : 0; }

private:
    uint64_t tasks_ = 0;
    int64_t issue_ns_ = 0;
    int64_t launch_ns_ = 0;
    int64_t shortest_launch_ns_ = std::numeric_limits<int64_t>::max();
};

}  // namespace mpt
