// The CUDA runtime's host functions that the emulated kernels' entry points call (the real runtime
// is not linked: without a GPU it would only report that there is none). The device they describe has
// the limits of a GPU of the compute capability the tests set (emulated_device_profile.h: an A100's at
// 8.0, an H200's at 9.0; multiprocessors as many unless a test sets fewer), its code compiled for that
// capability (mpt_emulation::set_compute_capability; 8.0 unless set, so that no entry point picks a
// path whose code only 9.0 has and the emulation leaves out: bulk copies, dependent launch; the
// clusters of the small-batch kernels are emulated, under 9.0). Memory is the host's: a stream runs
// its work at once, in order.
//
// Under the race check (race_check.h), the streams' order is checked too, as a GPU would keep it: a
// stream's work runs on an OS thread of the stream's own (emulated_threads.h: a ThreadSanitizer thread
// with its own stack) while the host waits, and that thread knows what the host did before issuing
// the work and what the events it waits on were recorded after; the host knows what a stream did
// once it has synchronised with it (the stream, an event recorded on it, or the device). So a
// kernel on one stream that reads what another stream's copy writes with no event between them is
// reported, and so is a host that writes a pinned buffer that a copy still reads, or reads results a
// stream has not been waited for. The legacy default stream runs as the host itself (its implicit
// synchronisation with the other streams is not modelled: nothing the backend issues goes there).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "cuda_emulation/emulated_device_profile.h"
#include "cuda_emulation/emulated_threads.h"
#include "cuda_emulation/race_check.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

thread_local cudaError_t last_error = cudaSuccess;

// A stream: its work runs when issued, unless it is capturing, when the work goes into its graph.
// Capture keeps the runtime's rules (cudaStreamBeginCapture, cudaThreadExchangeStreamCaptureMode): a
// thread with a capture under way in the global or thread-local mode, or any thread while one in the
// global mode is under way, may not make the potentially unsafe calls (cudaMalloc and cudaFree, the
// synchronous copies and sets, a device synchronisation); nor may anyone synchronise a capturing
// stream or wait on an event recorded in one. Such a call fails and invalidates the capture: the work
// issued after it is dropped, and ending the capture fails, as on a GPU.
struct Graph {
    std::vector<std::function<void()>> work;
    bool invalidated = false;
};
struct Stream {
    Graph* capture = nullptr;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
    std::thread::id capturing_thread;
    // The race check's: the thread its work runs on (taken at its first work), the lanes its kernels
    // run in, and what its work releases as it is done.
    mpt_emulation::StreamThread* race_thread = nullptr;
    unsigned lane_set = 0;
    char done = 0;
};
Stream default_stream;
unsigned streams_created = 0;  // under streams_mutex
// Every stream's work releases here too: what a device-wide synchronisation acquires.
char device_done = 0;
std::mutex streams_mutex;
std::vector<Stream*> capturing;  // under streams_mutex

// An event: the host's clock when the stream reached it (the work before it has run by then); and
// whether it was last recorded in a capture, when waiting on it or asking after it is not permitted.
struct Event {
    std::chrono::steady_clock::time_point reached;
    bool recorded_in_capture = false;
    char sync = 0;  // the race check's: the recording stream's work before it, for its waiters
};
bool event_recorded_in_capture(cudaEvent_t event) { return reinterpret_cast<const Event*>(event)->recorded_in_capture; }

// A potentially unsafe call on this thread: fails, invalidating the captures that forbid it, if any do.
cudaError_t unsafe_during_capture() {
    std::lock_guard<std::mutex> lock(streams_mutex);
    bool forbidden = false;
    for (Stream* s : capturing) {
        const bool forbids =
            s->mode == cudaStreamCaptureModeGlobal ||
            (s->mode == cudaStreamCaptureModeThreadLocal && s->capturing_thread == std::this_thread::get_id());
        if (!forbids) continue;
        s->capture->invalidated = true;
        forbidden = true;
    }
    return forbidden ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

Stream& stream_of(cudaStream_t stream) { return stream ? *reinterpret_cast<Stream*>(stream) : default_stream; }

// Runs a stream's work now (above: on the stream's thread, under the race check).
void run_in_stream_order(Stream& s, const std::function<void()>& work) {
    if (!mpt_emulation::race_check::kEnabled || &s == &default_stream) {
        work();
        return;
    }
    if (!s.race_thread) s.race_thread = mpt_emulation::take_stream_thread();
    mpt_emulation::run_on_stream_thread(*s.race_thread, s.lane_set, work, {&s.done, &device_done});
}

// Allocations by the runtime (cudaMalloc, cudaHostAlloc), to tell a copy's pageable host memory,
// which cudaMemcpyAsync reads or writes as if at once, from memory a stream's copy touches in its
// turn. The emulation's bookkeeping: neither its lock nor its accesses order or concern the kernels.
class Allocations {
public:
    void add(void* pointer, size_t bytes, bool pinned) {
        if (!mpt_emulation::race_check::kEnabled || !pointer) return;
        const Own own;
        std::lock_guard<std::mutex> lock(mutex_);
        ranges_[reinterpret_cast<uintptr_t>(pointer)] = Range{bytes, pinned};
    }
    void remove(void* pointer) {
        if (!mpt_emulation::race_check::kEnabled || !pointer) return;
        const Own own;
        std::lock_guard<std::mutex> lock(mutex_);
        ranges_.erase(reinterpret_cast<uintptr_t>(pointer));
    }
    // Whether a copy of `kind` reads or writes `pointer` as pageable host memory: host memory as the
    // kind says (cudaMemcpyDefault: any the runtime did not allocate), not pinned.
    bool pageable(const void* pointer, cudaMemcpyKind kind, bool source) {
        const Own own;
        std::lock_guard<std::mutex> lock(mutex_);
        const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
        const Range* range = nullptr;
        auto next = ranges_.upper_bound(address);
        if (next != ranges_.begin() && address < std::prev(next)->first + std::prev(next)->second.bytes)
            range = &std::prev(next)->second;
        if (range && range->pinned) return false;
        switch (kind) {
            case cudaMemcpyHostToHost:
                return true;
            case cudaMemcpyHostToDevice:
                return source;
            case cudaMemcpyDeviceToHost:
                return !source;
            case cudaMemcpyDefault:
                return range == nullptr;
            default:
                return false;
        }
    }

private:
    struct Range {
        size_t bytes;
        bool pinned;
    };
    struct Own {
        const mpt_emulation::race_check::OwnSynchronisation synchronisation;
        const mpt_emulation::race_check::OwnMemory memory;
    };
    std::mutex mutex_;
    std::map<uintptr_t, Range> ranges_;
};
Allocations& allocations() {
    static Allocations* all = new Allocations;  // (never destroyed: frees may come after static objects go)
    return *all;
}

cudaError_t record(cudaError_t status) {
    if (status != cudaSuccess) last_error = status;
    return status;
}

}  // namespace

extern "C" {

cudaError_t cudaGetLastError() {
    const cudaError_t status = last_error;
    last_error = cudaSuccess;
    return status;
}

cudaError_t cudaPeekAtLastError() { return last_error; }

const char* cudaGetErrorName(cudaError_t status) {
    switch (status) {
        case cudaSuccess:
            return "cudaSuccess";
        case cudaErrorStreamCaptureUnsupported:
            return "cudaErrorStreamCaptureUnsupported";
        case cudaErrorStreamCaptureInvalidated:
            return "cudaErrorStreamCaptureInvalidated";
        case cudaErrorStreamCaptureWrongThread:
            return "cudaErrorStreamCaptureWrongThread";
        case cudaErrorCapturedEvent:
            return "cudaErrorCapturedEvent";
        case cudaErrorIllegalState:
            return "cudaErrorIllegalState";
        case cudaErrorInvalidValue:
            return "cudaErrorInvalidValue";
        case cudaErrorInvalidDevice:
            return "cudaErrorInvalidDevice";
        case cudaErrorMemoryAllocation:
            return "cudaErrorMemoryAllocation";
        case cudaErrorNotSupported:
            return "cudaErrorNotSupported";
        default:
            return "cudaError";
    }
}

const char* cudaGetErrorString(cudaError_t status) {
    return status == cudaSuccess ? "no error" : "an emulated CUDA runtime call failed";
}

cudaError_t cudaGetDevice(int* device) {
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
    if (device != 0) return record(cudaErrorInvalidDevice);
    const mpt_emulation::DeviceProfile& profile = mpt_emulation::current_device_profile();
    switch (attribute) {
        case cudaDevAttrMultiProcessorCount:
            *value = mpt_emulation::multiprocessors();
            return cudaSuccess;
        case cudaDevAttrComputeCapabilityMajor:
            *value = mpt_emulation::compute_capability() / 10;
            return cudaSuccess;
        case cudaDevAttrComputeCapabilityMinor:
            *value = mpt_emulation::compute_capability() % 10;
            return cudaSuccess;
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
            *value = profile.shared_per_multiprocessor;
            return cudaSuccess;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin:
            *value = profile.shared_per_block_optin;
            return cudaSuccess;
        case cudaDevAttrReservedSharedMemoryPerBlock:
            *value = profile.reserved_shared_per_block;
            return cudaSuccess;
        case cudaDevAttrMaxThreadsPerMultiProcessor:
            *value = profile.threads_per_multiprocessor;
            return cudaSuccess;
        case cudaDevAttrMaxBlocksPerMultiprocessor:
            *value = profile.blocks_per_multiprocessor;
            return cudaSuccess;
        case cudaDevAttrMaxThreadsPerBlock:
            *value = 1024;
            return cudaSuccess;
        case cudaDevAttrWarpSize:
            *value = 32;
            return cudaSuccess;
        case cudaDevAttrL2CacheSize:
            *value = profile.l2_bytes;
            return cudaSuccess;
        default:
            return record(cudaErrorNotSupported);
    }
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, const void* /*function*/) {
    std::memset(attributes, 0, sizeof(*attributes));
    attributes->binaryVersion = mpt_emulation::compute_capability();
    attributes->ptxVersion = mpt_emulation::compute_capability();
    attributes->maxThreadsPerBlock = 1024;
    attributes->numRegs = 64;
    return cudaSuccess;
}

// The dynamic shared memory opt-in is kept (launches check it), up to the device's; the other
// attributes are hints.
cudaError_t cudaFuncSetAttribute(const void* function, cudaFuncAttribute attribute, int value) {
    if (attribute == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || value > mpt_emulation::current_device_profile().shared_per_block_optin)
            return record(cudaErrorInvalidValue);
        mpt_emulation::set_dynamic_shared_limit(function, static_cast<size_t>(value));
    }
    return cudaSuccess;
}

// Blocks an SM holds by its threads, by the launch's dynamic shared memory (with the system's share
// a block) and by its blocks, and at most 8: the kernels' registers and static shared memory, which
// the emulation does not know, are a GPU's concern.
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void* /*function*/,
                                                                   int block_size, size_t shared,
                                                                   unsigned int /*flags*/) {
    const mpt_emulation::DeviceProfile& profile = mpt_emulation::current_device_profile();
    if (block_size <= 0 || block_size > 1024 || shared > static_cast<size_t>(profile.shared_per_block_optin)) {
        *blocks = 0;
        return cudaSuccess;
    }
    const size_t block_share = shared + static_cast<size_t>(profile.reserved_shared_per_block);
    const int by_shared = block_share == 0 ? profile.blocks_per_multiprocessor
                                           : static_cast<int>(profile.shared_per_multiprocessor / block_share);
    *blocks =
        std::min({profile.threads_per_multiprocessor / block_size, by_shared, profile.blocks_per_multiprocessor, 8});
    return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* function, int block_size,
                                                          size_t shared) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, function, block_size, shared, 0);
}

// Two clusters of up to 8 blocks fit a pair of multiprocessors: 66 at once on 132 (9.0 only).
cudaError_t cudaOccupancyMaxActiveClusters(int* clusters, const void* /*function*/, const cudaLaunchConfig_t* config) {
    *clusters = 0;
    if (mpt_emulation::compute_capability() < 90) return record(cudaErrorNotSupported);
    for (unsigned a = 0; a < config->numAttrs; ++a)
        if (config->attrs[a].id == cudaLaunchAttributeClusterDimension && config->attrs[a].val.clusterDim.x > 8)
            return cudaSuccess;
    *clusters = 66;
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* pointer, int value, size_t bytes, cudaStream_t stream) {
    mpt_emulation::issue(stream, [=] { std::memset(pointer, value, bytes); });
    return cudaSuccess;
}

// From pageable host memory the runtime stages the bytes before it returns, and into it it returns once
// the copy (and so the stream's work before it) is done: under the race check the host reads the
// source now, and knows the stream's work after a copy into pageable memory.
cudaError_t cudaMemcpyAsync(void* destination, const void* source, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
    if (!mpt_emulation::race_check::kEnabled) {
        mpt_emulation::issue(stream, [=] { std::memmove(destination, source, bytes); });
        return cudaSuccess;
    }
    if (allocations().pageable(source, kind, true)) {
        std::vector<unsigned char> staged(static_cast<const unsigned char*>(source),
                                          static_cast<const unsigned char*>(source) + bytes);
        mpt_emulation::issue(stream, [=] { std::memmove(destination, staged.data(), bytes); });
    } else {
        mpt_emulation::issue(stream, [=] { std::memmove(destination, source, bytes); });
    }
    if (allocations().pageable(destination, kind, false)) {
        std::lock_guard<std::mutex> lock(streams_mutex);
        if (!stream_of(stream).capture) mpt_emulation::race_check::acquire(&stream_of(stream).done);
    }
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : record(cudaErrorInvalidDevice); }

// Memory: the host's, 256-byte aligned as cudaMalloc's.
cudaError_t cudaMalloc(void** pointer, size_t bytes) {
    if (const cudaError_t refused = unsafe_during_capture()) return record(refused);
    *pointer = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    allocations().add(*pointer, bytes, false);
    return *pointer || bytes == 0 ? cudaSuccess : record(cudaErrorMemoryAllocation);
}
// It waits for the device first, as cudaFree does.
cudaError_t cudaFree(void* pointer) {
    if (const cudaError_t refused = unsafe_during_capture()) return record(refused);
    mpt_emulation::race_check::acquire(&device_done);
    allocations().remove(pointer);
    std::free(pointer);
    return cudaSuccess;
}

// Streams and events: work runs when it is issued, so there is nothing to wait for and no time.
// The streams made one after another take the race check's lane sets in turn (a backend's compute
// and copy streams: one each).
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int /*flags*/) {
    Stream* made = new Stream;
    {
        std::lock_guard<std::mutex> lock(streams_mutex);
        made->lane_set = streams_created++ % mpt_emulation::kRaceLaneSets;
    }
    *stream = reinterpret_cast<cudaStream_t>(made);
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (!stream) return cudaSuccess;
    {
        std::lock_guard<std::mutex> lock(streams_mutex);
        capturing.erase(std::remove(capturing.begin(), capturing.end(), reinterpret_cast<Stream*>(stream)),
                        capturing.end());
    }
    Stream* destroyed = reinterpret_cast<Stream*>(stream);
    mpt_emulation::give_back_stream_thread(destroyed->race_thread);
    delete destroyed;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(streams_mutex);
    Stream& s = stream_of(stream);
    if (!s.capture) {
        mpt_emulation::race_check::acquire(&s.done);
        return cudaSuccess;
    }
    s.capture->invalidated = true;
    return record(cudaErrorStreamCaptureUnsupported);
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
    {
        std::lock_guard<std::mutex> lock(streams_mutex);
        // A wait on an event recorded in a capture joins the stream to it (a fork), which the
        // emulation does not model: it says so instead of recording work out of order.
        if (event_recorded_in_capture(event) && !stream_of(stream).capture) {
            std::fprintf(stderr, "emulated CUDA: a stream waits on an event recorded in a capture (a fork)\n");
            return record(cudaErrorNotSupported);
        }
        if (stream_of(stream).capture) return cudaSuccess;  // (ordered in the graph's one queue anyway)
    }
    const char* sync = &reinterpret_cast<const Event*>(event)->sync;
    mpt_emulation::issue(stream, [sync] { mpt_emulation::race_check::acquire(sync); });
    return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
    std::lock_guard<std::mutex> lock(streams_mutex);
    const Graph* capture = stream_of(stream).capture;
    *status = !capture               ? cudaStreamCaptureStatusNone
              : capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                     : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
    std::lock_guard<std::mutex> lock(streams_mutex);
    Stream& s = stream_of(stream);
    if (s.capture) return record(cudaErrorIllegalState);
    if (&s == &default_stream) return record(cudaErrorStreamCaptureUnsupported);  // the legacy stream
    s.capture = new Graph;
    s.mode = mode;
    s.capturing_thread = std::this_thread::get_id();
    capturing.push_back(&s);
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
    std::lock_guard<std::mutex> lock(streams_mutex);
    Stream& s = stream_of(stream);
    if (!s.capture) return record(cudaErrorIllegalState);
    if (s.mode != cudaStreamCaptureModeRelaxed && s.capturing_thread != std::this_thread::get_id())
        return record(cudaErrorStreamCaptureWrongThread);
    Graph* captured = s.capture;
    s.capture = nullptr;
    capturing.erase(std::find(capturing.begin(), capturing.end(), &s));
    if (captured->invalidated) {
        delete captured;
        *graph = nullptr;
        return record(cudaErrorStreamCaptureInvalidated);
    }
    *graph = reinterpret_cast<cudaGraph_t>(captured);
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long /*flags*/) {
    *exec = reinterpret_cast<cudaGraphExec_t>(new Graph(*reinterpret_cast<Graph*>(graph)));
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    const Graph* graph = reinterpret_cast<const Graph*>(exec);
    mpt_emulation::issue(stream, [graph] {
        for (const std::function<void()>& work : graph->work) work();
    });
    return cudaSuccess;
}
// (A graph's work is the emulation's, which a stream read as it ran: not the kernels' memory.)
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    const mpt_emulation::race_check::OwnMemory own;
    delete reinterpret_cast<Graph*>(graph);
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    const mpt_emulation::race_check::OwnMemory own;
    delete reinterpret_cast<Graph*>(exec);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void* destination, const void* source, size_t bytes, cudaMemcpyKind) {
    if (const cudaError_t refused = unsafe_during_capture()) return record(refused);
    std::memmove(destination, source, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemset(void* pointer, int value, size_t bytes) {
    if (const cudaError_t refused = unsafe_during_capture()) return record(refused);
    std::memset(pointer, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
    if (const cudaError_t refused = unsafe_during_capture()) return record(refused);
    mpt_emulation::race_check::acquire(&device_done);
    return cudaSuccess;
}

// Pinned host memory: the host's.
cudaError_t cudaHostAlloc(void** pointer, size_t bytes, unsigned int /*flags*/) {
    const cudaError_t status = cudaMalloc(pointer, bytes);
    if (status == cudaSuccess) allocations().add(*pointer, bytes, true);
    return status;
}
cudaError_t cudaFreeHost(void* pointer) { return cudaFree(pointer); }

cudaError_t cudaGetDeviceCount(int* count) {
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
    if (device != 0) return record(cudaErrorInvalidDevice);
    const mpt_emulation::DeviceProfile& profile = mpt_emulation::current_device_profile();
    *properties = cudaDeviceProp{};
    std::snprintf(properties->name, sizeof properties->name, "emulated %s (tests/cuda_emulation)", profile.model);
    properties->major = mpt_emulation::compute_capability() / 10;
    properties->minor = mpt_emulation::compute_capability() % 10;
    properties->multiProcessorCount = mpt_emulation::multiprocessors();
    properties->totalGlobalMem = profile.global_memory;
    properties->l2CacheSize = profile.l2_bytes;
    properties->persistingL2CacheMaxSize = 0;
    properties->sharedMemPerBlockOptin = static_cast<size_t>(profile.shared_per_block_optin);
    properties->sharedMemPerMultiprocessor = static_cast<size_t>(profile.shared_per_multiprocessor);
    properties->reservedSharedMemPerBlock = static_cast<size_t>(profile.reserved_shared_per_block);
    properties->warpSize = 32;
    properties->maxThreadsPerBlock = 1024;
    properties->maxThreadsPerMultiProcessor = profile.threads_per_multiprocessor;
    properties->maxBlocksPerMultiProcessor = profile.blocks_per_multiprocessor;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) {
    *event = reinterpret_cast<cudaEvent_t>(new Event{std::chrono::steady_clock::now()});
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int /*flags*/) { return cudaEventCreate(event); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
    delete reinterpret_cast<Event*>(event);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    Event* reached = reinterpret_cast<Event*>(event);
    {
        std::lock_guard<std::mutex> lock(streams_mutex);
        reached->recorded_in_capture = stream_of(stream).capture != nullptr;
    }
    mpt_emulation::issue(stream, [reached] {
        {
            const mpt_emulation::race_check::OwnMemory own;  // (the event's clock: not the kernels' memory)
            reached->reached = std::chrono::steady_clock::now();
        }
        mpt_emulation::race_check::release(&reached->sync);
    });
    return cudaSuccess;
}
// The event has been reached (the emulation's streams run their work at once): the host knows the
// recording stream's work before it.
cudaError_t cudaEventQuery(cudaEvent_t event) {
    std::lock_guard<std::mutex> lock(streams_mutex);
    if (event_recorded_in_capture(event)) return record(cudaErrorCapturedEvent);
    mpt_emulation::race_check::acquire(&reinterpret_cast<const Event*>(event)->sync);
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) { return cudaEventQuery(event); }
cudaError_t cudaEventElapsedTime(float* milliseconds, cudaEvent_t start, cudaEvent_t end) {
    const mpt_emulation::race_check::OwnMemory own;
    const auto span = reinterpret_cast<Event*>(end)->reached - reinterpret_cast<Event*>(start)->reached;
    *milliseconds = std::chrono::duration<float, std::milli>(span).count();
    return cudaSuccess;
}

namespace {
CUresult emulated_context_get(CUcontext* context) {
    static int current;
    *context = reinterpret_cast<CUcontext>(&current);
    return CUDA_SUCCESS;
}
CUresult emulated_context_set(CUcontext) { return CUDA_SUCCESS; }
}  // namespace

// The driver's current-context calls the backend saves and restores around its work.
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function, unsigned int /*version*/,
                                             unsigned long long /*flags*/, cudaDriverEntryPointQueryResult* status) {
    *function = nullptr;
    if (std::strcmp(symbol, "cuCtxGetCurrent") == 0) *function = reinterpret_cast<void*>(&emulated_context_get);
    if (std::strcmp(symbol, "cuCtxSetCurrent") == 0) *function = reinterpret_cast<void*>(&emulated_context_set);
    if (status) *status = *function ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}

}  // extern "C"

void mpt_emulation::issue(cudaStream_t stream, std::function<void()> work) {
    Stream* s = nullptr;
    {
        std::lock_guard<std::mutex> lock(streams_mutex);
        s = &stream_of(stream);
        if (s->capture) {
            if (s->capture->invalidated)
                record(cudaErrorStreamCaptureInvalidated);
            else
                s->capture->work.push_back(std::move(work));
            return;
        }
    }
    if (!race_check::kEnabled) {
        run_in_stream_order(*s, work);
        return;
    }
    // The work and its captures are the emulation's, which the stream reads as it runs: on the heap,
    // let go unchecked after, so that the host's next use of the place races with nothing.
    std::function<void()>* held = new std::function<void()>(std::move(work));
    run_in_stream_order(*s, *held);
    const race_check::OwnMemory own;
    delete held;
}
