// SPDX-License-Identifier: GPL-3.0-or-later
#include "cuda_sim.h"

#include <ucontext.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

#include <cstdlib>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace cuda_sim {
namespace {

// 256 KB per thread: kernels keep a few hundred bytes of registers, but the host's libm and
// c10's conversions run on these stacks too. Allocated untouched, so pages are only mapped
// where used.
constexpr size_t kStackBytes = 256 * 1024;

struct Fiber {
    ucontext_t context{};
    dim3 index;
    int linear = 0;
    bool done = false;
    bool waiting = false;
};

// A barrier for a group of fibers (the block, or a warp): the last to arrive releases the rest.
struct Barrier {
    int expected = 0;
    std::vector<Fiber*> waiting;
};

struct Warp {
    Barrier published, read; // all lanes' values are in; all lanes have read them
    unsigned mask = 0;       // the lanes this warp has
    uint64_t slots[32] = {};
};

struct BlockRun {
    dim3 grid, block, index;
    const std::function<void()>* body = nullptr;
    std::vector<Fiber> fibers;
    std::vector<char*> stacks; // from stack_pool()
    Barrier block_barrier;
    std::vector<Warp> warps;
    ucontext_t scheduler{};
    Fiber* current = nullptr;
    int finished = 0;
    const void* scheduler_stack = nullptr; // the calling thread's, for the sanitizer
    size_t scheduler_stack_size = 0;
    std::exception_ptr error;
};

// AddressSanitizer follows the stack switches (scripts/sanitize.sh runs this test under it):
// without these calls it takes a fiber's stack for the thread's and reports its frames as out of
// scope. No-ops in other builds.
void start_switch(void** fake_stack_save, const void* bottom, size_t size)
{
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_start_switch_fiber(fake_stack_save, bottom, size);
#else
    (void)fake_stack_save, (void)bottom, (void)size;
#endif
}
void finish_switch(void* fake_stack_save, const void** bottom_old, size_t* size_old)
{
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(fake_stack_save, bottom_old, size_old);
#else
    (void)fake_stack_save, (void)bottom_old, (void)size_old;
#endif
}

BlockRun* g_run = nullptr;

// The threads' stacks, kept from launch to launch: allocating 1,024 of them for each of the
// delayed record's 840 launches was most of the tests' system time (an mmap and munmap each).
std::vector<std::unique_ptr<char[]>>& stack_pool()
{
    static std::vector<std::unique_ptr<char[]>> pool;
    return pool;
}
int g_multiprocessors = 132; // an H200's
int64_t g_launches = 0;
// CUDA_SIM_ORDER=reverse sets the order for a whole test run (CTest runs the kernels' test
// both ways).
Order g_order = [] {
    const char* order = std::getenv("CUDA_SIM_ORDER");
    return order != nullptr && std::string(order) == "reverse" ? Order::Reverse : Order::Forward;
}();

BlockRun& run()
{
    if (g_run == nullptr) throw std::logic_error("cuda_sim: device code called outside a launch");
    return *g_run;
}

void fail(const std::string& what) { throw std::runtime_error("cuda_sim: " + what); }

std::string thread_name(const Fiber& f)
{
    const BlockRun& r = run();
    return "thread (" + std::to_string(f.index.x) + "," + std::to_string(f.index.y) + "," + std::to_string(f.index.z) +
           ") of block (" + std::to_string(r.index.x) + "," + std::to_string(r.index.y) + "," +
           std::to_string(r.index.z) + ")";
}

void yield()
{
    BlockRun& r = run();
    void* fake_stack = nullptr;
    start_switch(&fake_stack, r.scheduler_stack, r.scheduler_stack_size);
    swapcontext(&r.current->context, &r.scheduler);
    finish_switch(fake_stack, &r.scheduler_stack, &r.scheduler_stack_size);
}

// Waits until every member of the group has arrived; a fiber that finished can never arrive.
void arrive(Barrier& b)
{
    BlockRun& r = run();
    if (static_cast<int>(b.waiting.size()) + 1 == b.expected) {
        for (Fiber* f : b.waiting) f->waiting = false;
        b.waiting.clear();
        return;
    }
    r.current->waiting = true;
    b.waiting.push_back(r.current);
    yield();
}

Warp& warp_of_current(unsigned mask)
{
    BlockRun& r = run();
    Warp& w = r.warps[r.current->linear / 32];
    if (mask != w.mask)
        fail("a warp intrinsic with mask " + std::to_string(mask) + " in " + thread_name(*r.current) +
             ": only the warp's whole mask is simulated");
    return w;
}

void fiber_entry()
{
    BlockRun& r = *g_run;
    Fiber* self = r.current;
    finish_switch(nullptr, &r.scheduler_stack, &r.scheduler_stack_size);
    try {
        (*r.body)();
        // A thread that leaves while others wait at a barrier it will never reach: on a GPU a
        // hang or undefined behaviour, here a failed launch.
        if (!r.block_barrier.waiting.empty())
            fail(thread_name(*self) + " returned while others wait at __syncthreads");
        const Warp& w = r.warps[self->linear / 32];
        if (!w.published.waiting.empty() || !w.read.waiting.empty())
            fail(thread_name(*self) + " returned while its warp waits in a warp intrinsic");
    } catch (...) {
        if (!r.error) r.error = std::current_exception();
    }
    self->done = true;
    ++r.finished;
    start_switch(nullptr, r.scheduler_stack, r.scheduler_stack_size); // this stack is done with
    swapcontext(&self->context, &r.scheduler);                         // never resumed
}

void run_block(BlockRun& r)
{
    const int threads = static_cast<int>(r.fibers.size());
    r.finished = 0;
    r.block_barrier = Barrier{threads, {}};
    for (size_t w = 0; w < r.warps.size(); ++w) {
        const int lanes = std::min(32, threads - static_cast<int>(w) * 32);
        r.warps[w].published = Barrier{lanes, {}};
        r.warps[w].read = Barrier{lanes, {}};
        r.warps[w].mask = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
    }
    for (int t = 0; t < threads; ++t) {
        Fiber& f = r.fibers[t];
        f.done = f.waiting = false;
        getcontext(&f.context);
        f.context.uc_stack.ss_sp = r.stacks[static_cast<size_t>(t)];
        f.context.uc_stack.ss_size = kStackBytes;
        f.context.uc_link = nullptr;
        makecontext(&f.context, fiber_entry, 0);
    }
    while (r.finished < threads) {
        bool ran = false;
        for (int i = 0; i < threads; ++i) {
            Fiber& f = r.fibers[g_order == Order::Forward ? i : threads - 1 - i];
            if (f.done || f.waiting) continue;
            r.current = &f;
            void* fake_stack = nullptr;
            start_switch(&fake_stack, r.stacks[static_cast<size_t>(f.linear)], kStackBytes);
            swapcontext(&r.scheduler, &f.context);
            finish_switch(fake_stack, nullptr, nullptr);
            ran = true;
            if (r.error) std::rethrow_exception(r.error);
        }
        if (!ran) {
            // Everyone left is waiting: some wait at a barrier that others passed or left.
            for (const Fiber& f : r.fibers)
                if (f.waiting) fail(thread_name(f) + " waits at a barrier that the rest of its block or warp never reaches");
        }
    }
}

} // namespace

const dim3& thread_idx() { return run().current->index; }
const dim3& block_idx() { return run().index; }
const dim3& block_dim() { return run().block; }
const dim3& grid_dim() { return run().grid; }
int lane_id() { return run().current->linear % 32; }

void sync_threads() { arrive(run().block_barrier); }

void warp_gather(unsigned mask, uint64_t bits, uint64_t (&all)[32])
{
    BlockRun& r = run();
    Warp& w = warp_of_current(mask);
    const int lane = r.current->linear % 32;
    w.slots[lane] = bits;
    arrive(w.published);
    for (int l = 0; l < 32; ++l) all[l] = (w.mask >> l & 1u) != 0 ? w.slots[l] : bits;
    arrive(w.read);
}

void run_grid(dim3 grid, dim3 block, const std::function<void()>& body)
{
    if (g_run != nullptr) fail("a launch from device code");
    const unsigned long long threads = 1ull * block.x * block.y * block.z;
    if (threads == 0 || threads > 1024) fail("a block of " + std::to_string(threads) + " threads (1 to 1024)");
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535)
        fail("a grid of (" + std::to_string(grid.x) + "," + std::to_string(grid.y) + "," + std::to_string(grid.z) + ")");
    ++g_launches;
    BlockRun r;
    r.grid = grid;
    r.block = block;
    r.body = &body;
    r.fibers.resize(threads);
    r.warps.resize((threads + 31) / 32);
    int t = 0;
    for (unsigned z = 0; z < block.z; ++z)
        for (unsigned y = 0; y < block.y; ++y)
            for (unsigned x = 0; x < block.x; ++x, ++t) {
                r.fibers[t].index = dim3(x, y, z);
                r.fibers[t].linear = t;
                if (stack_pool().size() <= static_cast<size_t>(t)) stack_pool().emplace_back(new char[kStackBytes]);
                r.stacks.push_back(stack_pool()[static_cast<size_t>(t)].get());
            }
    g_run = &r;
    try {
        for (unsigned z = 0; z < grid.z; ++z)
            for (unsigned y = 0; y < grid.y; ++y)
                for (unsigned x = 0; x < grid.x; ++x) {
                    r.index = dim3(x, y, z);
                    run_block(r);
                }
    } catch (...) {
        g_run = nullptr;
        throw;
    }
    g_run = nullptr;
}

void set_multiprocessors(int count) { g_multiprocessors = count; }
int multiprocessors() { return g_multiprocessors; }
int64_t launches() { return g_launches; }
void set_order(Order order) { g_order = order; }

} // namespace cuda_sim
