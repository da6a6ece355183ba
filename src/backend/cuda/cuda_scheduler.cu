// See cuda_scheduler.cuh.
#include "backend/cuda/cuda_scheduler.cuh"

#include "backend/cuda/cuda_common.cuh"

namespace mpt {

CudaScheduler::CudaScheduler(CudaTaskHooks& hooks) : hooks_(hooks) {
    try {
        for (cudaStream_t& stream : streams_) MPT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        for (cudaEvent_t& event : events_) MPT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
        for (cudaEvent_t& event : timer_) MPT_CUDA_CHECK(cudaEventCreate(&event));
    } catch (...) {
        for (cudaEvent_t event : events_)
            if (event) discard_cuda_error(cudaEventDestroy(event));
        for (cudaEvent_t event : timer_)
            if (event) discard_cuda_error(cudaEventDestroy(event));
        for (cudaStream_t stream : streams_)
            if (stream) discard_cuda_error(cudaStreamDestroy(stream));
        throw;
    }
}

CudaScheduler::~CudaScheduler() {
    for (cudaStream_t stream : streams_) discard_cuda_error(cudaStreamSynchronize(stream));
    for (cudaEvent_t event : events_) discard_cuda_error(cudaEventDestroy(event));
    for (cudaEvent_t event : timer_) discard_cuda_error(cudaEventDestroy(event));
    for (cudaStream_t stream : streams_) discard_cuda_error(cudaStreamDestroy(stream));
}

void CudaScheduler::submit(Lane lane, TaskFn task, void* argument) {
    const Lane saved = current_;
    // Only an outermost compute task is recorded; nested tasks become part of whatever runs them.
    const bool recorded = lane == Lane::compute && depth_ == 0;
    current_ = lane;
    ++depth_;
    try {
        if (recorded) hooks_.begin_compute_task();
        task(argument);
        if (recorded) hooks_.end_compute_task();
    } catch (...) {
        if (recorded) hooks_.abandon_compute_task();
        current_ = saved;
        --depth_;
        throw;
    }
    current_ = saved;
    --depth_;
}

cudaEvent_t CudaScheduler::next_event(Lane lane, uint64_t& ticket) {
    ticket = ++issued_tickets_;
    event_lanes_[ticket % kEvents] = lane;
    return events_[ticket % kEvents];
}

Event CudaScheduler::record(Lane lane) {
    hooks_.flush_recording();
    uint64_t ticket;
    const cudaEvent_t event = next_event(lane, ticket);
    MPT_CUDA_CHECK(cudaEventRecord(event, stream(lane)));
    return Event{lane, ticket};
}

cudaEvent_t CudaScheduler::event_for(const Event& event) {
    uint64_t ticket = event.ticket;
    // The ring reuses events: an event older than the ring was re-recorded since. A later event of
    // its lane stands for a later point on the same stream, so waiting on it (or finding it
    // complete) is still correct; the earliest one the ring holds waits least past the point asked for.
    if (issued_tickets_ - ticket >= kEvents) {
        for (uint64_t later = issued_tickets_ - kEvents + 1; later <= issued_tickets_; ++later)
            if (event_lanes_[later % kEvents] == event.lane) {
                ticket = later;
                break;
            }
    }
    // When the lane recorded nothing for a whole ring, mark the lane's current end instead, a later
    // point on the right stream.
    if (issued_tickets_ - ticket >= kEvents) {
        const cudaEvent_t fresh = next_event(event.lane, ticket);
        MPT_CUDA_CHECK(cudaEventRecord(fresh, stream(event.lane)));
        return fresh;
    }
    return events_[ticket % kEvents];
}

void CudaScheduler::wait(Lane waiter, const Event& event) {
    if (event.ticket == 0 || event.lane == waiter) return;  // a stream is already ordered with itself
    hooks_.flush_recording();
    MPT_CUDA_CHECK(cudaStreamWaitEvent(stream(waiter), event_for(event), 0));
}

bool CudaScheduler::completed(const Event& event) {
    if (event.ticket == 0) return true;
    // A fresh event may be recorded for it (event_for): after everything issued so far.
    hooks_.flush_recording();
    return event_passed(event_for(event));
}

void CudaScheduler::wait_host(const Event& event) {
    if (completed(event)) return;
    ++host_syncs_;
    MPT_CUDA_CHECK(cudaEventSynchronize(event_for(event)));
}

void CudaScheduler::start_timer() {
    hooks_.flush_recording();
    MPT_CUDA_CHECK(cudaEventRecord(timer_[0], stream(Lane::compute)));
}

void CudaScheduler::stop_timer() {
    hooks_.flush_recording();
    MPT_CUDA_CHECK(cudaEventRecord(timer_[1], stream(Lane::compute)));
}

double CudaScheduler::timer_seconds() {
    if (!event_passed(timer_[1])) ++host_syncs_;
    MPT_CUDA_CHECK(cudaEventSynchronize(timer_[1]));
    float milliseconds = 0.0f;
    MPT_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, timer_[0], timer_[1]));
    return milliseconds * 1e-3;
}

void CudaScheduler::order_other_lane_after(Lane lane) {
    const Lane other = other_lane(lane);
    uint64_t ticket;
    const cudaEvent_t event = next_event(lane, ticket);
    MPT_CUDA_CHECK(cudaEventRecord(event, stream(lane)));
    MPT_CUDA_CHECK(cudaStreamWaitEvent(stream(other), event, 0));
}

void CudaScheduler::drain() {
    ++host_syncs_;
    for (cudaStream_t stream : streams_) MPT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void CudaScheduler::synchronize() {
    hooks_.flush_recording();
    drain();
}

}  // namespace mpt
