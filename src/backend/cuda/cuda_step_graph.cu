// See cuda_step_graph.cuh.
#include "backend/cuda/cuda_step_graph.cuh"

#include <utility>

#include "backend/cuda/cuda_common.cuh"

namespace mpt {

StepGraphCache::~StepGraphCache() { clear(); }

void StepGraphCache::clear() {
    // An executable graph still running is freed by the driver when it completes.
    for (Entry& entry : entries_)
        if (entry.exec) discard_cuda_error(cudaGraphExecDestroy(entry.exec));
    entries_.clear();
}

StepGraphCache::Entry* StepGraphCache::find(const TaskSignature& signature) {
    for (Entry& entry : entries_)
        if (entry.signature == signature.bytes()) return &entry;
    return nullptr;
}

StepGraphCache::Action StepGraphCache::lookup(const TaskSignature& signature, cudaGraphExec_t& exec) {
    ++clock_;
    if (Entry* entry = find(signature)) {
        entry->last_use = clock_;
        if (entry->refused) return Action::run_eagerly;
        if (entry->exec) {
            exec = entry->exec;
            return Action::replay;
        }
        return Action::capture;  // second sighting
    }
    if (entries_.size() >= kMaxEntries) {
        size_t oldest = 0;
        for (size_t i = 1; i < entries_.size(); ++i)
            if (entries_[i].last_use < entries_[oldest].last_use) oldest = i;
        if (entries_[oldest].exec) discard_cuda_error(cudaGraphExecDestroy(entries_[oldest].exec));
        entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(oldest));
    }
    Entry entry;
    entry.signature = signature.bytes();
    entry.last_use = clock_;
    entries_.push_back(std::move(entry));
    return Action::run_eagerly;
}

void StepGraphCache::store(const TaskSignature& signature, cudaGraphExec_t exec) {
    Entry* entry = find(signature);
    if (!entry) {
        discard_cuda_error(cudaGraphExecDestroy(exec));
        return;
    }
    if (entry->exec) discard_cuda_error(cudaGraphExecDestroy(entry->exec));
    entry->exec = exec;
    ++captures_;
}

void StepGraphCache::refuse(const TaskSignature& signature, std::string why) {
    if (Entry* entry = find(signature)) {
        entry->refused = true;
        if (entry->exec) discard_cuda_error(cudaGraphExecDestroy(entry->exec));
        entry->exec = nullptr;
    }
    ++refusals_;
    last_refusal_ = std::move(why);
}

}  // namespace mpt
