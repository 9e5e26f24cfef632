// The member tables (core/fact_fields.h) both ways: what fields_from() renders, read_json() reads
// back into an equal struct, by the same declaration; and the readers of a report find its keys
// by the attribute each field has everywhere else.
#include "core/fact_fields_read.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/json_writer.h"
#include "core/overflow_facts.h"

using namespace msprobe;

namespace {

// What the report writes of `value`, as a JSON object.
template <typename T>
nlohmann::json written(const std::vector<MemberField<T>>& table, const T& value) {
  JsonWriter w;
  w.begin_object();
  write_json_fields(w, fields_from(table, value));
  w.end_object();
  return nlohmann::json::parse(w.str());
}

}  // namespace

TEST(MemberFields, AReplayReadsBackWhatWasWritten) {
  ReplayFacts r;
  r.kind = "wider";
  r.dtype = "torch.float32";
  r.device = "cpu";
  r.finite = true;
  r.max = 1.5e5;
  r.verdict = "replay in float32: finite";
  const nlohmann::json j = written(replay_members(), r);
  EXPECT_TRUE(j["min"].is_null());
  const ReplayFacts back = read_json(replay_members(), j);
  EXPECT_EQ(back.kind, r.kind);
  EXPECT_EQ(back.dtype, r.dtype);
  EXPECT_EQ(back.device, r.device);
  EXPECT_EQ(back.finite, r.finite);
  EXPECT_EQ(back.max, r.max);
  EXPECT_FALSE(back.min.has_value());
  EXPECT_EQ(back.verdict, r.verdict);
  // The verdict is the message's line; no other field has one.
  for (const FactField& f : fields_from(replay_members(), r))
    EXPECT_EQ(f.line, std::string(f.json) == "verdict" ? r.verdict : "") << f.json;
}

TEST(MemberFields, APeerStopReadsBackWithItsEmptyTextsAsNull) {
  const PeerOverflow peer{3, 12, "Torch.mm.2.forward", "", "InputNormalOutputAnomaly", ""};
  const nlohmann::json j = written(peer_overflow_members(), peer);
  EXPECT_EQ(j.size(), peer_overflow_members().size());
  EXPECT_TRUE(j["origin"].is_null() && j["level"].is_null());
  const PeerOverflow back = read_json(peer_overflow_members(), j);
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.step, 12);
  EXPECT_EQ(back.call, peer.call);
  EXPECT_EQ(back.origin, "");
  EXPECT_EQ(back.scene, peer.scene);
}

TEST(MemberFields, AValueOfAnotherTypeKeepsTheDefault) {
  const nlohmann::json j = {{"rank", "three"}, {"step", 4.5}, {"call", 7}, {"origin", "op"}};
  const PeerOverflow back = read_json(peer_overflow_members(), j);
  EXPECT_EQ(back.rank, 0);
  EXPECT_EQ(back.step, 0);
  EXPECT_EQ(back.call, "");
  EXPECT_EQ(back.origin, "op");
  EXPECT_EQ(read_json(peer_overflow_members(), nlohmann::json::array()).call, "");
}

TEST(MemberFields, AHeadroomPointIsTheReportsStepsEntry) {
  HeadroomPoint p;
  p.step = 7;
  p.fraction = 0.25;
  p.magnitude = 16384.0;
  const nlohmann::json j = written(headroom_point_members(), p);
  EXPECT_EQ(j, (nlohmann::json{{"step", 7}, {"max", 16384.0}, {"fraction", 0.25}}));
  const HeadroomPoint back = read_json(headroom_point_members(), j);
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.magnitude, 16384.0);
}

TEST(MemberFields, AReportsKeysAreFoundByTheirAttributes) {
  EXPECT_STREQ(report_key("call"), "api_name");
  EXPECT_STREQ(report_key("origin"), "origin");
  EXPECT_STREQ(report_key("not_replayed"), "not_replayed");
  EXPECT_THROW(report_key("no_such_attribute"), std::logic_error);
}
