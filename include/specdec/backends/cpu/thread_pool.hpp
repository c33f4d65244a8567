#pragma once
// A small persistent thread pool for the model's kernels. A forward pass makes
// a few hundred short parallel sections (one per matrix product, attention,
// ...), so waking threads through the OS each time would cost more than the
// work: idle workers spin briefly and only then block on a condition variable.
//
// Tasks are claimed from one atomic word (generation, task count, next task),
// and the caller waits for the *completed* count, not for every worker to
// check in: on a busy machine a worker that is not scheduled in time simply
// misses the section while the caller (which always takes part) does its
// share, instead of the whole section waiting for that worker's time slice.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace specdec::cpu {

class ThreadPool {
public:
    // `threads` counts the caller; 0 means std::thread::hardware_concurrency().
    explicit ThreadPool(std::size_t threads = 0) {
        if (threads == 0) threads = std::max<std::size_t>(1, std::thread::hardware_concurrency());
        workers_.reserve(threads - 1);
        for (std::size_t i = 0; i + 1 < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
    }
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;
    ~ThreadPool() {
        {
            std::lock_guard lock(mutex_);
            stopping_.store(true, std::memory_order_release);
        }
        wake_.notify_all();
        for (auto& worker : workers_) worker.join();
    }

    [[nodiscard]] std::size_t size() const noexcept { return workers_.size() + 1; }

    // Calls fn(task) for every task in [0, tasks), spread over the threads;
    // returns when all calls have returned. Not reentrant: fn must not call
    // parallel_for on the same pool. The first exception thrown is rethrown.
    template <class Fn>
    void parallel_for(std::size_t tasks, Fn&& fn) {
        if (tasks == 0) return;
        if (workers_.empty() || tasks == 1) {
            for (std::size_t t = 0; t < tasks; ++t) fn(t);
            return;
        }
        std::lock_guard serial(call_mutex_);  // one parallel section at a time
        for (std::size_t begin = 0; begin < tasks; begin += kMaxTasks) {
            const std::size_t count = std::min(kMaxTasks, tasks - begin);
            auto shifted = [&](std::size_t task) { fn(begin + task); };
            run_section(count, &shifted, [](void* context, std::size_t task) { (*static_cast<decltype(shifted)*>(context))(task); });
        }
    }

private:
    // The claim word: generation (32 bits) | task count (16 bits) | next task (16 bits).
    static constexpr std::size_t kMaxTasks = 0xFFFF;
    static std::uint32_t generation_of(std::uint64_t word) noexcept { return static_cast<std::uint32_t>(word >> 32); }
    static std::size_t count_of(std::uint64_t word) noexcept { return (word >> 16) & 0xFFFF; }
    static std::size_t next_of(std::uint64_t word) noexcept { return word & 0xFFFF; }

    static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
        _mm_pause();
#else
        std::this_thread::yield();
#endif
    }

    void run_section(std::size_t count, void* context, void (*invoke)(void*, std::size_t)) {
        job_context_.store(context, std::memory_order_relaxed);
        job_invoke_.store(invoke, std::memory_order_relaxed);
        completed_.store(0, std::memory_order_relaxed);
        error_ = nullptr;
        ++generation_;
        const std::uint64_t word = (static_cast<std::uint64_t>(generation_) << 32) | (static_cast<std::uint64_t>(count) << 16);
        {
            std::lock_guard lock(mutex_);  // so that a worker about to sleep cannot miss the new section
            claim_.store(word, std::memory_order_release);
        }
        if (sleepers_.load(std::memory_order_acquire) > 0) wake_.notify_all();
        claim_and_run(word);
        for (unsigned spins = 1; completed_.load(std::memory_order_acquire) != count; ++spins) {
            if (spins % 1024 == 0) std::this_thread::yield();
            else pause();
        }
        if (error_) std::rethrow_exception(error_);
    }

    // Runs tasks of the section `word` belongs to until none is left. A task
    // is only run after a successful compare-exchange on the claim word, which
    // proves its section is still open, so the job pointers read before it are
    // that section's.
    void claim_and_run(std::uint64_t word) {
        const std::uint32_t generation = generation_of(word);
        void* const context = job_context_.load(std::memory_order_acquire);
        void (*const invoke)(void*, std::size_t) = job_invoke_.load(std::memory_order_acquire);
        for (;;) {
            if (generation_of(word) != generation || next_of(word) >= count_of(word)) return;
            if (claim_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
                try {
                    invoke(context, next_of(word));
                } catch (...) {
                    std::lock_guard lock(error_mutex_);
                    if (!error_) error_ = std::current_exception();
                }
                completed_.fetch_add(1, std::memory_order_acq_rel);
                word = claim_.load(std::memory_order_acquire);
            }
        }
    }

    void worker_loop() {
        std::uint32_t handled = 0;
        for (;;) {
            // Spin ~50 microseconds for the next section of the same forward pass.
            const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
            std::uint64_t word = claim_.load(std::memory_order_acquire);
            for (int i = 0; generation_of(word) == handled && !stopping_.load(std::memory_order_acquire); ++i) {
                pause();
                if ((i & 63) == 63 && std::chrono::steady_clock::now() > spin_until) {
                    std::unique_lock lock(mutex_);
                    sleepers_.fetch_add(1, std::memory_order_acq_rel);
                    wake_.wait(lock, [&] {
                        return generation_of(claim_.load(std::memory_order_acquire)) != handled ||
                               stopping_.load(std::memory_order_acquire);
                    });
                    sleepers_.fetch_sub(1, std::memory_order_acq_rel);
                }
                word = claim_.load(std::memory_order_acquire);
            }
            if (stopping_.load(std::memory_order_acquire)) return;
            handled = generation_of(word);
            claim_and_run(word);
        }
    }

    std::vector<std::thread> workers_;
    std::mutex call_mutex_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::atomic<std::uint64_t> claim_{0};
    std::atomic<std::size_t> completed_{0};
    std::atomic<std::size_t> sleepers_{0};
    std::atomic<void*> job_context_{nullptr};
    std::atomic<void (*)(void*, std::size_t)> job_invoke_{nullptr};
    std::atomic<bool> stopping_{false};
    std::uint32_t generation_ = 0;  // written by the calling thread only
    std::mutex error_mutex_;
    std::exception_ptr error_;
};

}  // namespace specdec::cpu
