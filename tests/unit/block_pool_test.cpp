// The block pools both transports hand to tgt's core: size classes, reuse
// without a new block, alignment, the pooled-bytes cap, the hooks (memory
// registration for iSER), and the queue that holds blocks back until their
// send is done; plus the C ABI the glue calls, and the data budget that
// counts a connection's blocks.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "rbio/bs/block_pool.h"
#include "rbio/bs/block_pool.hpp"
#include "rbio/bs/data_budget.h"

#include <string>
#include <vector>

using rbio::tp::Block;
using rbio::tp::BlockPool;
using rbio::tp::BlockPoolConfig;
using rbio::tp::ReleaseQueue;

namespace {

bool aligned(const void* p, uintptr_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; }

struct Hooks {
    int made = 0, destroyed = 0;
    bool refuse = false;
};

BlockPoolConfig data_config() {
    BlockPoolConfig c;
    c.min_shift = 12;
    c.classes = 3;  // 4, 8, 16 KiB
    c.pooled_max = 32u << 10;
    c.tail = 4;
    return c;
}

TEST(BlockPool, SizeClasses) {
    BlockPool p(data_config());
    EXPECT_EQ(p.size_class(0), 0);
    EXPECT_EQ(p.size_class(4096), 0);
    EXPECT_EQ(p.size_class(4097), 1);
    EXPECT_EQ(p.size_class(16384), 2);
    EXPECT_EQ(p.size_class(16385), -1);
    EXPECT_EQ(p.size_class(1), 0);
    EXPECT_EQ(p.size_class(8193), 2);  // an iSER receive's 8.25 KiB
    EXPECT_EQ(p.size_class(8192), 1);
    EXPECT_EQ(p.size_class(size_t(1) << 40), -1);
    EXPECT_EQ(p.size_class(SIZE_MAX), -1);
}

TEST(BlockPool, ReusesAReleasedBlockOfItsClass) {
    BlockPool p(data_config());
    void* a = p.alloc(5000);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(Block::of(a)->size, 8192u);
    std::memset(a, 0xab, 8192 + 4);  // the usable size and the tail are writable
    BlockPool::release(a);
    EXPECT_EQ(p.pooled_bytes(), 8192u);
    void* b = p.alloc(8000);
    EXPECT_EQ(b, a);
    EXPECT_EQ(p.pooled_bytes(), 0u);
    EXPECT_EQ(p.blocks_made(), 1u);
    void* c = p.alloc(4096);  // another class: a new block
    EXPECT_NE(c, a);
    EXPECT_EQ(p.blocks_made(), 2u);
    BlockPool::release(b);
    BlockPool::release(c);
}

TEST(BlockPool, PageAlignedOrSixteenAligned) {
    BlockPool data(data_config());
    BlockPoolConfig tc;
    tc.min_shift = 6;
    tc.classes = 8;
    tc.page_aligned = false;
    BlockPool tasks(tc);
    BlockPoolConfig mc = data_config();
    mc.mapped = true;
    mc.tail = 4096;
    BlockPool mapped(mc);
    std::vector<void*> got;
    for (size_t size : {1u, 100u, 4096u, 12000u, 20000u}) {
        void* d = data.alloc(size);
        void* t = tasks.alloc(size);
        void* m = mapped.alloc(size);
        ASSERT_TRUE(d && t && m);
        EXPECT_TRUE(aligned(d, 4096)) << size;
        EXPECT_TRUE(aligned(m, 4096)) << size;
        EXPECT_TRUE(aligned(t, 16)) << size;
        EXPECT_GE(Block::of(d)->size, size);
        EXPECT_GE(Block::of(t)->size, size);
        std::memset(m, 1, Block::of(m)->size + 4096);
        got.insert(got.end(), {d, t, m});
    }
    for (void* p : got) BlockPool::release(p);
}

// A size near SIZE_MAX: rounded up to whole pages it would wrap to 0, and
// a block of no bytes would come back as the size asked.
TEST(BlockPool, RefusesASizeThatWouldWrap) {
    BlockPool data(data_config());
    BlockPoolConfig mc = data_config();
    mc.mapped = true;
    BlockPool mapped(mc);
    for (size_t size : {SIZE_MAX, SIZE_MAX - 10, SIZE_MAX / 2 + 1}) {
        EXPECT_EQ(data.alloc(size), nullptr) << size;
        EXPECT_EQ(mapped.alloc(size), nullptr) << size;
    }
}

TEST(BlockPool, KeepsAtMostPooledMaxBytes) {
    BlockPool p(data_config());  // 32 KiB
    std::vector<void*> blocks;
    blocks.reserve(3);
    for (int i = 0; i < 3; ++i) blocks.push_back(p.alloc(16384));
    for (void* b : blocks) BlockPool::release(b);
    EXPECT_EQ(p.pooled_bytes(), 32768u);  // the third went back to the system
    void* big = p.alloc(1 << 20);         // beyond the classes: not pooled
    ASSERT_NE(big, nullptr);
    EXPECT_EQ(Block::of(big)->cls, -1);
    BlockPool::release(big);
    EXPECT_EQ(p.pooled_bytes(), 32768u);
}

TEST(BlockPool, TrimGivesKeptBlocksBackAndKeepsThoseInUse) {
    Hooks h;
    BlockPoolConfig c = data_config();
    c.ctx = &h;
    c.on_make = [](void* ctx, Block&) { return ++static_cast<Hooks*>(ctx)->made > 0; };
    c.on_destroy = [](void* ctx, Block&) { ++static_cast<Hooks*>(ctx)->destroyed; };
    BlockPool p(c);
    void* kept = p.alloc(4096);
    void* used = p.alloc(4096);
    BlockPool::release(kept);
    p.trim();
    EXPECT_EQ(p.pooled_bytes(), 0u);
    EXPECT_EQ(h.destroyed, 1);
    std::memset(used, 2, 4096);  // still valid
    BlockPool::release(used);    // and back to the pool as usual
    EXPECT_EQ(p.pooled_bytes(), 4096u);
    EXPECT_EQ(p.alloc(4096), used);
    BlockPool::release(used);
}

TEST(BlockPool, OwnsOnlyItsBlocks) {
    BlockPool a(data_config()), b(data_config());
    void* x = a.alloc(10);
    EXPECT_TRUE(a.owns(x));
    EXPECT_FALSE(b.owns(x));
    BlockPool::release(x);
}

TEST(BlockPool, HooksRunOncePerBlockMadeAndDestroyed) {
    Hooks h;
    BlockPoolConfig c = data_config();
    c.mapped = true;
    c.ctx = &h;
    c.on_make = [](void* ctx, Block& b) {
        auto* hooks = static_cast<Hooks*>(ctx);
        if (hooks->refuse) return false;
        b.tag = ctx;
        ++hooks->made;
        return true;
    };
    c.on_destroy = [](void* ctx, Block& b) {
        EXPECT_EQ(b.tag, ctx);
        ++static_cast<Hooks*>(ctx)->destroyed;
    };
    {
        BlockPool p(c);
        for (int i = 0; i < 4; ++i) BlockPool::release(p.alloc(4096));
        EXPECT_EQ(h.made, 1);  // reused, not made (so registered) again
        h.refuse = true;
        void* kept = p.alloc(4096);  // from the free stack: no hook
        EXPECT_NE(kept, nullptr);
        EXPECT_EQ(p.alloc(4096), nullptr);  // a new block the hook refuses
        EXPECT_EQ(h.destroyed, 0);          // a refused block is not undone
        BlockPool::release(kept);
    }
    EXPECT_EQ(h.destroyed, 1);  // the pooled one, with the pool
}

TEST(BlockPool, RejectsClassesBeyondASizeT) {
    BlockPoolConfig c;
    c.min_shift = 60;
    c.classes = 8;
    EXPECT_THROW(BlockPool{c}, std::invalid_argument);
}

TEST(ReleaseQueue, HoldsBlocksUntilTheirCountIsDone) {
    BlockPool p(data_config());
    ReleaseQueue q;
    void* a = p.alloc(4096);
    void* b = p.alloc(4096);
    void* c = p.alloc(4096);
    q.release_after(Block::of(a), 5, 5);  // done already: released now
    EXPECT_EQ(p.pooled_bytes(), 4096u);
    q.release_after(Block::of(b), 7, 5);
    q.release_after(Block::of(c), 9, 5);
    EXPECT_FALSE(q.empty());
    q.release_done(6);
    EXPECT_EQ(p.pooled_bytes(), 4096u);
    q.release_done(8);
    EXPECT_EQ(p.pooled_bytes(), 8192u);
    q.release_done(9);
    EXPECT_EQ(p.pooled_bytes(), 12288u);
    EXPECT_TRUE(q.empty());
    EXPECT_EQ(p.blocks_made(), 3u);
}

TEST(ReleaseQueue, ReleasesEverythingWhenDestroyed) {
    BlockPool p(data_config());
    {
        ReleaseQueue q;
        q.release_after(Block::of(p.alloc(4096)), 100, 0);
        q.release_after(Block::of(p.alloc(8192)), 200, 0);
        EXPECT_EQ(p.pooled_bytes(), 0u);
    }
    EXPECT_EQ(p.pooled_bytes(), 12288u);
}

TEST(BlockPoolCApi, AllocReleaseAndDeferredRelease) {
    rbio_pool_config c{12, 2, 1u << 20, 1, 4};
    char err[128] = "";
    rbio_pool* p = rbio_pool_new(&c, err, sizeof err);
    ASSERT_NE(p, nullptr) << err;
    void* a = rbio_pool_alloc(p, 100);
    ASSERT_NE(a, nullptr);
    EXPECT_TRUE(aligned(a, 4096));
    rbio_release_queue* q = rbio_release_queue_new();
    ASSERT_NE(q, nullptr);
    rbio_release_after(q, a, 2, 1);
    void* other = rbio_pool_alloc(p, 100);
    EXPECT_NE(other, a);  // still held back
    rbio_pool_release(other);
    rbio_release_done(q, 2);
    void* again = rbio_pool_alloc(p, 100);
    EXPECT_EQ(again, a);
    rbio_pool_release(again);
    rbio_pool_release(nullptr);
    rbio_release_queue_free(q);
    rbio_pool_free(p);
}

TEST(BlockPoolCApi, ReportsAnImpossibleConfig) {
    rbio_pool_config c{62, 4, 0, 0, 0};
    char err[128] = "";
    EXPECT_EQ(rbio_pool_new(&c, err, sizeof err), nullptr);
    EXPECT_NE(std::strstr(err, "size classes"), nullptr) << err;
}

// A connection's data buffers are counted until they are released, directly
// or once the send that holds them is done; a block used again is not
// counted unless charged again.
TEST(BlockPool, ChargedBlocksAreCountedUntilReleased) {
    BlockPool p(data_config());
    size_t held = 0;
    void* a = p.alloc(5000);      // the 8 KiB class
    void* b = p.alloc(100);       // 4 KiB
    void* big = p.alloc(100000);  // past the classes: its own size, page rounded
    BlockPool::charge(a, &held);
    BlockPool::charge(b, &held);
    rbio_pool_charge(big, &held);
    EXPECT_EQ(held, 8192u + 4096u + 102400u);

    BlockPool::release(b);
    EXPECT_EQ(held, 8192u + 102400u);
    rbio_pool_release(big);
    EXPECT_EQ(held, 8192u);

    ReleaseQueue q;
    q.release_after(Block::of(a), 3, 1);  // its send not done yet: still held
    EXPECT_EQ(held, 8192u);
    q.release_done(3);
    EXPECT_EQ(held, 0u);

    void* again = p.alloc(5000);  // the same block, from the free stack
    EXPECT_EQ(again, a);
    BlockPool::release(again);
    EXPECT_EQ(held, 0u);
}

TEST(DataBudget, AdmitsWithinTheLimitAndAnythingAlone) {
    rbio_data_budget none = rbio_data_budget_of_mib(0);
    none.held = size_t(1) << 40;
    EXPECT_TRUE(rbio_data_budget_admits(&none, size_t(1) << 31));

    rbio_data_budget b = rbio_data_budget_of_mib(64);
    EXPECT_EQ(b.limit, size_t(64) << 20);
    EXPECT_TRUE(rbio_data_budget_admits(&b, size_t(2) << 30));  // nothing held: any one command
    b.held = size_t(48) << 20;
    EXPECT_TRUE(rbio_data_budget_admits(&b, size_t(16) << 20));  // up to the limit exactly
    EXPECT_FALSE(rbio_data_budget_admits(&b, (size_t(16) << 20) + 1));
    b.held = size_t(2) << 30;  // over it after a large command alone: nothing more
    EXPECT_FALSE(rbio_data_budget_admits(&b, 1));
    EXPECT_FALSE(rbio_data_budget_admits(&b, SIZE_MAX));
    b.held = 1;
    EXPECT_FALSE(rbio_data_budget_admits(&b, SIZE_MAX));  // no wrap

    b.held = (size_t(63) << 20) + 1;
    char why[256];
    rbio_data_budget_why(&b, size_t(2) << 20, why, sizeof why);
    EXPECT_STREQ(why,
                 "a command wants 2 MiB of data buffers while the connection holds 64 MiB, over "
                 "data_budget_mib=64 (a host that does not read its responses keeps their buffers held)");
}

// The process's total (data_budget_total_mib): connections on its list,
// with what each holds; the global restored after each test.
class DataTotal : public ::testing::Test {
protected:
    static constexpr size_t kMiB = size_t(1) << 20;
    struct Conn {
        rbio_data_budget budget = rbio_data_budget_of_mib(0);
        std::vector<std::string> closes;  // why, each time it was asked to close
    };
    static void close(void* ctx, const char* why) { static_cast<Conn*>(ctx)->closes.emplace_back(why); }

    void SetUp() override {
        saved_ = rbio_all_data;
        rbio_all_data = {0, 0, nullptr};
        rbio_data_total_set_limit_mib(256);
    }
    void TearDown() override { rbio_all_data = saved_; }
    // Joins c holding `mib` MiB (counted in the total, as charging does).
    void join(Conn& c, size_t mib) {
        rbio_data_budget_join(&c.budget, close, &c);
        c.budget.held = mib * kMiB;
        rbio_all_data.held += mib * kMiB;
    }

    struct rbio_data_total saved_ {};
};

TEST_F(DataTotal, WithinItAnyoneIsServedWithoutAWalk) {
    Conn a, b;
    join(a, 128);
    join(b, 64);
    EXPECT_TRUE(rbio_data_total_admits(&b.budget, 64 * kMiB));  // up to the total exactly
    EXPECT_TRUE(a.closes.empty());
    rbio_data_total_set_limit_mib(0);  // none: anything
    EXPECT_TRUE(rbio_data_total_admits(&b.budget, size_t(1) << 40));
    rbio_data_budget_leave(&a.budget);
    rbio_data_budget_leave(&b.budget);
    EXPECT_EQ(rbio_all_data.first, nullptr);
}

TEST_F(DataTotal, ClosesTheConnectionHoldingTheMostAndServesTheAsker) {
    Conn a, b, c;
    join(a, 192);
    join(b, 32);
    join(c, 0);
    EXPECT_TRUE(rbio_data_total_admits(&b.budget, 64 * kMiB));
    ASSERT_EQ(a.closes.size(), 1u);
    EXPECT_EQ(a.closes[0],
              "it holds 192 MiB of data buffers, the most of the connections not being closed, and a "
              "command of 64 MiB on another would take tgtd's over data_budget_total_mib=256 (a host that "
              "does not read its responses keeps their buffers held)");
    EXPECT_EQ(a.budget.closing, 1);
    EXPECT_TRUE(c.closes.empty());
    // a's bytes are on their way out: no longer counted, and a is not
    // asked again.
    b.budget.held += 64 * kMiB;
    rbio_all_data.held += 64 * kMiB;
    EXPECT_TRUE(rbio_data_total_admits(&c.budget, 128 * kMiB));
    EXPECT_EQ(a.closes.size(), 1u);
    EXPECT_TRUE(b.closes.empty());
}

TEST_F(DataTotal, ClosesTheLargestFirstAndNoMoreThanNeeded) {
    Conn a, b, c, d;
    join(a, 30);
    join(b, 120);
    join(c, 100);
    join(d, 0);
    EXPECT_TRUE(rbio_data_total_admits(&d.budget, 20 * kMiB));  // 250 + 20: one must go, b
    EXPECT_EQ(b.closes.size(), 1u);
    EXPECT_TRUE(a.closes.empty());
    EXPECT_TRUE(c.closes.empty());
}

TEST_F(DataTotal, ClosesAsManyAsTheBufferNeeds) {
    Conn a, b, c;
    join(a, 100);
    join(b, 100);
    join(c, 50);
    EXPECT_TRUE(rbio_data_total_admits(&c.budget, 200 * kMiB));  // 250 + 200: both others go
    EXPECT_EQ(a.closes.size(), 1u);
    EXPECT_EQ(b.closes.size(), 1u);
    EXPECT_EQ(c.budget.closing, 0);
}

TEST_F(DataTotal, TheAskerHoldingTheMostTiesIncludedIsRefused) {
    Conn a, b;
    join(a, 128);
    join(b, 128);
    EXPECT_FALSE(rbio_data_total_admits(&b.budget, 1));
    EXPECT_EQ(b.budget.closing, 1);  // the caller closes it: no longer counted
    EXPECT_TRUE(a.closes.empty());
    EXPECT_TRUE(b.closes.empty());  // the caller logs its own line
    char why[320];
    rbio_data_budget_why(&b.budget, 1, why, sizeof why);
    EXPECT_STREQ(why,
                 "a command wants 1 MiB of data buffers while the connection holds 128 MiB, the most of "
                 "any connection, and tgtd's would go over data_budget_total_mib=256 (a host that does not "
                 "read its responses keeps their buffers held)");
    EXPECT_TRUE(rbio_data_total_admits(&a.budget, 128 * kMiB));  // b no longer counts
}

TEST_F(DataTotal, NobodyIsClosedWhenThatWouldNotMakeRoom) {
    Conn a, b, c;
    join(a, 64);
    join(b, 128);
    join(c, 32);
    // Closing b (the only one holding more than a) leaves 96 + 300: over.
    EXPECT_FALSE(rbio_data_total_admits(&a.budget, 300 * kMiB));
    EXPECT_TRUE(b.closes.empty());
    EXPECT_TRUE(c.closes.empty());
    EXPECT_EQ(a.budget.closing, 1);
    char why[320];
    rbio_data_budget_why(&a.budget, 300 * kMiB, why, sizeof why);
    EXPECT_STREQ(why,
                 "a command wants 300 MiB of data buffers while the connection holds 64 MiB, and tgtd's "
                 "would go over data_budget_total_mib=256 even with every connection that holds more closed "
                 "(a host that does not read its responses keeps their buffers held)");

    // Holding nothing, a buffer over the total by itself is served alone,
    // and costs nobody their connection.
    Conn d;
    join(d, 0);
    EXPECT_TRUE(rbio_data_total_admits(&d.budget, 400 * kMiB));
    EXPECT_TRUE(b.closes.empty());
    EXPECT_TRUE(c.closes.empty());
}

TEST_F(DataTotal, NobodyElseIsClosedForABufferWithinTheTotalThatClosingCannotFit) {
    Conn a, b, c;
    join(a, 100);
    join(b, 120);
    join(c, 100);
    // Closing every connection holding more than a (b alone) leaves
    // 200 + 60: still over. c holds no more than a, so a goes.
    EXPECT_FALSE(rbio_data_total_admits(&a.budget, 60 * kMiB));
    EXPECT_TRUE(b.closes.empty());
    EXPECT_TRUE(c.closes.empty());
    EXPECT_EQ(a.budget.closing, 1);
}

TEST_F(DataTotal, AConnectionAloneGetsAnyOneBuffer) {
    Conn a, b;
    join(a, 0);
    join(b, 0);
    EXPECT_TRUE(rbio_data_total_admits(&a.budget, size_t(1) << 30));  // over the total, nobody holds
    EXPECT_TRUE(a.closes.empty());
    EXPECT_TRUE(b.closes.empty());
    EXPECT_EQ(a.budget.closing, 0);
}

TEST_F(DataTotal, ChargingCountsInTheTotalUntilRelease) {
    BlockPool p(BlockPoolConfig{});
    Conn a;
    join(a, 0);
    void* x = p.alloc(100 << 10);
    BlockPool::charge(x, &a.budget.held);
    EXPECT_EQ(rbio_all_data.held, size_t(128) << 10);
    void* y = p.alloc(4096);
    BlockPool::charge(y, &a.budget.held);
    ReleaseQueue q;
    q.release_after(Block::of(x), 2, 1);
    BlockPool::release(y);
    EXPECT_EQ(rbio_all_data.held, size_t(128) << 10);
    q.release_done(2);
    EXPECT_EQ(rbio_all_data.held, 0u);
    EXPECT_EQ(a.budget.held, 0u);
    rbio_data_budget_leave(&a.budget);
}

}  // namespace
