// The flight recorder's ring on its own (no MPI): it numbers calls 1, 2, ..., states move
// queued -> started -> completed, a full ring keeps exactly the newest `slots` calls, and its
// JSON carries each field as recorded (checked against the values written here, not against
// the writer).
#include <gtest/gtest.h>

#include "comm/flight_recorder.h"
#include "comm/mpi_op.h"

using namespace dpt::dist;
using dpt::DType;

namespace {

CallSignature signature(OpKind op, DType dtype, int64_t count, int root = 0) {
  return {static_cast<int32_t>(op), static_cast<int32_t>(ReduceOp::sum), static_cast<int32_t>(dtype), root,
          count};
}

}  // namespace

TEST(FlightRing, StatesAndFields) {
  FlightRing ring("world", 1, {0, 1}, 4);
  EXPECT_EQ(ring.queued(signature(OpKind::all_reduce, DType::f32, 10)), 1);
  EXPECT_EQ(ring.queued(signature(OpKind::broadcast, DType::i64, 7)), 2);
  EXPECT_EQ(ring.queued(signature(OpKind::barrier, DType::f32, 0)), 3);
  ring.started(1);
  ring.completed(1);
  ring.started(2);
  nlohmann::json j = ring.to_json();
  EXPECT_EQ(j["group"], "world");
  EXPECT_EQ(j["rank"], 1);
  EXPECT_EQ(j["world_ranks"], nlohmann::json({0, 1}));
  EXPECT_EQ(j["slots"], 4);
  const auto& e = j["entries"];
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0]["seq"], 1);
  EXPECT_EQ(e[0]["op"], "all_reduce");
  EXPECT_EQ(e[0]["reduce"], "sum");
  EXPECT_EQ(e[0]["count"], 10);
  EXPECT_FALSE(e[0].contains("root"));
  EXPECT_EQ(e[0]["state"], "completed");
  EXPECT_LE(e[0]["queued_us"].get<int64_t>(), e[0]["started_us"].get<int64_t>());
  EXPECT_LE(e[0]["started_us"].get<int64_t>(), e[0]["completed_us"].get<int64_t>());
  EXPECT_EQ(e[1]["state"], "started");
  EXPECT_EQ(e[1]["root"], 0);
  EXPECT_EQ(e[1]["dtype"], "i64");
  EXPECT_FALSE(e[1].contains("reduce"));
  EXPECT_FALSE(e[1].contains("completed_us"));
  EXPECT_EQ(e[2]["state"], "queued");
  EXPECT_FALSE(e[2].contains("count"));
  EXPECT_FALSE(e[2].contains("started_us"));
}

TEST(FlightRing, WrapsAroundKeepingTheNewest) {
  FlightRing ring("g", 0, {0}, 4);
  EXPECT_EQ(ring.latest().seq, 0);
  for (int64_t s = 1; s <= 10; ++s) {
    ring.queued(signature(OpKind::all_reduce, DType::f32, 10 * s));
    if (s <= 8) ring.completed(s);
  }
  ring.started(9);
  ring.completed(2);  // long overwritten by #6: ignored
  const auto e = ring.to_json()["entries"];
  ASSERT_EQ(e.size(), 4u);
  const char* states[] = {"completed", "completed", "started", "queued"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(e[i]["seq"], 7 + i);
    EXPECT_EQ(e[i]["count"], 10 * (7 + i));
    EXPECT_EQ(e[i]["state"], states[i]);
  }
  // What the control channel answers other ranks with: the newest call, and one still held.
  EXPECT_EQ(ring.latest().seq, 10);
  EXPECT_EQ(ring.find(8).signature.count, 80);
  EXPECT_EQ(ring.find(6).seq, 0);   // overwritten by #10
  EXPECT_EQ(ring.find(11).seq, 0);  // not made yet
}

TEST(FlightRing, DumpWithoutStartWritesNothing) { EXPECT_EQ(flight_dump("test"), ""); }
