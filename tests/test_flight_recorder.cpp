// The flight recorder's ring on its own (no MPI): states move queued -> started ->
// completed, a full ring keeps exactly the newest `slots` calls, and its JSON carries each
// field as recorded (checked against the values written here, not against the writer).
#include <gtest/gtest.h>

#include "comm/flight_recorder.h"

using namespace dpt::dist;

namespace {

FlightCall call(int64_t seq) { return {seq, "all_reduce", "sum", "f32", 10 * seq, -1}; }

}  // namespace

TEST(FlightRing, StatesAndFields) {
  FlightRing ring("world", 1, {0, 1}, 4);
  ring.queued(call(1));
  ring.queued({2, "broadcast", nullptr, "i64", 7, 0});
  ring.queued({3, "barrier", nullptr, "f32", -1, -1});
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
  for (int64_t s = 1; s <= 10; ++s) {
    ring.queued(call(s));
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
}

TEST(FlightRing, DumpWithoutStartWritesNothing) { EXPECT_EQ(flight_dump("test"), ""); }
