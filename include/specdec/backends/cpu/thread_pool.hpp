#pragma once
// A small persistent thread pool for the model's kernels. A forward pass makes
// a few hundred short parallel sections (one per matrix product, attention,
// ...), so waking threads through the OS each time would cost more than the
// work: idle workers spin briefly on an atomic generation counter and only
// then block on a condition variable. The calling thread always takes part.
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
            stopping_ = true;
            generation_.fetch_add(1, std::memory_order_release);
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
        job_context_ = static_cast<void*>(&fn);
        job_invoke_ = [](void* context, std::size_t task) { (*static_cast<std::remove_reference_t<Fn>*>(context))(task); };
        job_tasks_ = tasks;
        next_task_.store(0, std::memory_order_relaxed);
        error_ = nullptr;
        busy_workers_.store(workers_.size(), std::memory_order_relaxed);
        {
            std::lock_guard lock(mutex_);
            generation_.fetch_add(1, std::memory_order_release);
        }
        if (sleepers_.load(std::memory_order_acquire) > 0) wake_.notify_all();
        run_tasks();
        // Spin for the stragglers, yielding once in a while: on an oversubscribed
        // machine a descheduled worker needs this core to finish.
        for (unsigned spins = 1; busy_workers_.load(std::memory_order_acquire) != 0; ++spins) {
            if (spins % 1024 == 0) std::this_thread::yield();
            else pause();
        }
        if (error_) std::rethrow_exception(error_);
    }

private:
    static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
        _mm_pause();
#else
        std::this_thread::yield();
#endif
    }

    void run_tasks() {
        for (;;) {
            const std::size_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
            if (task >= job_tasks_) return;
            try {
                job_invoke_(job_context_, task);
            } catch (...) {
                std::lock_guard lock(error_mutex_);
                if (!error_) error_ = std::current_exception();
            }
        }
    }

    void worker_loop() {
        std::uint64_t seen = 0;
        for (;;) {
            // Spin ~50 microseconds for the next section of the same forward pass.
            const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
            std::uint64_t current = generation_.load(std::memory_order_acquire);
            for (int i = 0; current == seen; ++i) {
                pause();
                if ((i & 63) == 63 && std::chrono::steady_clock::now() > spin_until) break;
                current = generation_.load(std::memory_order_acquire);
            }
            if (current == seen) {
                std::unique_lock lock(mutex_);
                sleepers_.fetch_add(1, std::memory_order_acq_rel);
                wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
                sleepers_.fetch_sub(1, std::memory_order_acq_rel);
                current = generation_.load(std::memory_order_acquire);
            }
            seen = current;
            if (stopping_) return;
            run_tasks();
            busy_workers_.fetch_sub(1, std::memory_order_acq_rel);
        }
    }

    std::vector<std::thread> workers_;
    std::mutex call_mutex_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::atomic<std::uint64_t> generation_{0};
    std::atomic<std::size_t> sleepers_{0};
    std::atomic<std::size_t> next_task_{0};
    std::atomic<std::size_t> busy_workers_{0};
    std::size_t job_tasks_ = 0;
    void* job_context_ = nullptr;
    void (*job_invoke_)(void*, std::size_t) = nullptr;
    std::mutex error_mutex_;
    std::exception_ptr error_;
    bool stopping_ = false;
};

}  // namespace specdec::cpu
