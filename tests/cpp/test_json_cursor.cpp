#include "core/json_cursor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "test_util.h"

namespace msprobe {
namespace {

using msprobe::testing::error_of;

std::string describe(const Scalar& s) {
  char buf[40];
  switch (s.kind) {
    case Scalar::Kind::Null:
      return "null";
    case Scalar::Kind::Bool:
      return s.boolean ? "true" : "false";
    case Scalar::Kind::Int:
      return "i:" + std::to_string(s.integer);
    case Scalar::Kind::Float:
      std::snprintf(buf, sizeof buf, "f:%.17g", s.number);
      return buf;
    case Scalar::Kind::String:
      return "s:" + s.text();
    default:
      return "?";
  }
}

// Any value as the cursor's iteration sees it.
std::string walk(JsonCursor& cur) {
  std::string out;
  if (cur.peek() == '{') {
    cur.begin_object();
    std::string key;
    out = "{";
    while (cur.next_key(key)) out += key + "=" + walk(cur) + ";";
    return out + "}";
  }
  if (cur.peek() == '[') {
    cur.begin_array();
    out = "[";
    while (cur.next_item()) out += walk(cur) + ";";
    return out + "]";
  }
  return describe(cur.read_scalar());
}

// `call` on a cursor over `text`, its result or "<offset>: <message>" of the error it throws.
template <class Call>
std::string outcome(JsonCursor& cur, Call call) {
  std::string result;
  const std::string error = error_of<JsonSyntaxError>(
      [&] { result = call(cur); },
      [](const JsonSyntaxError& e) { return std::to_string(e.offset()) + ": " + e.what(); });
  return error == msprobe::testing::kAccepted ? result : error;
}

// The same call on `text` in memory and streamed a few bytes at a time must agree.
template <class Call>
std::string both(const std::string& text, Call call) {
  JsonCursor whole(text);
  const std::string expected = outcome(whole, call);
  for (size_t chunk : {size_t{1}, size_t{2}, size_t{5}}) {
    JsonCursor streamed = testing::chunked_cursor(text, chunk);
    EXPECT_EQ(outcome(streamed, call), expected) << "chunk " << chunk << " of " << text;
  }
  return expected;
}

std::string value(const std::string& text) {
  return both(text, [](JsonCursor& c) { return walk(c); });
}

std::string scalar(const std::string& text) {
  return both(text, [](JsonCursor& c) { return describe(c.read_scalar()); });
}

TEST(JsonCursorTest, ScalarsOfEveryKind) {
  EXPECT_EQ(scalar("null"), "null");
  EXPECT_EQ(scalar(" true"), "true");
  EXPECT_EQ(scalar("false "), "false");
  EXPECT_EQ(scalar("42"), "i:42");
  EXPECT_EQ(scalar("-7"), "i:-7");
  EXPECT_EQ(scalar("0"), "i:0");
  EXPECT_EQ(scalar("1.5"), "f:1.5");
  EXPECT_EQ(scalar("-2E+2"), "f:-200");
  EXPECT_EQ(scalar("\"text\""), "s:text");
}

// skip_ws reads 16 bytes at a time where it can: runs of every length, of all four whitespace
// bytes, ending anywhere in such a block or at the end of the text, in memory and streamed.
TEST(JsonCursorTest, WhitespaceRunsOfEveryLengthAndKindAreSkipped) {
  const std::string kinds = " \n\r\t";
  for (size_t n = 0; n <= 40; ++n) {
    std::string ws;
    for (size_t i = 0; i < n; ++i) ws += kinds[(i * 7 + n) % kinds.size()];
    EXPECT_EQ(value("[" + ws + "1" + ws + "," + ws + "\"a\"" + ws + "]"), "[i:1;s:a;]") << n;
    const auto scalar_then_end = [](JsonCursor& c) {
      const std::string read = describe(c.read_scalar());
      return read + (c.at_end() ? " end" : " more");
    };
    EXPECT_EQ(both(ws + "7" + ws, scalar_then_end), "i:7 end") << n;
    // A byte that JSON does not count as whitespace ends the run where it stands.
    const std::string stopped = value("[" + ws + "\f1]");
    EXPECT_EQ(stopped.substr(0, stopped.find(':')), std::to_string(n + 1)) << stopped;
  }
}

TEST(JsonCursorTest, PythonsNonFiniteTokens) {
  EXPECT_EQ(scalar("NaN"), "f:nan");
  EXPECT_EQ(scalar("Infinity"), "f:inf");
  EXPECT_EQ(scalar("-Infinity"), "f:-inf");
}

TEST(JsonCursorTest, NumbersBeyondTheirTypeReadAsPythonReadsThem) {
  EXPECT_EQ(scalar("9223372036854775807"), "i:9223372036854775807");
  EXPECT_EQ(scalar("-9223372036854775808"), "i:-9223372036854775808");
  EXPECT_EQ(scalar("9223372036854775808"), "f:9.2233720368547758e+18");
  EXPECT_EQ(scalar("1e999"), "f:inf");
  EXPECT_EQ(scalar("-1e999"), "f:-inf");
  EXPECT_EQ(scalar("1e-999"), "f:0");
}

TEST(JsonCursorTest, MalformedNumbersSayWhatIsWrongAndWhere) {
  EXPECT_EQ(scalar("01"), "0: invalid number: leading zero");
  EXPECT_EQ(scalar("1."), "2: invalid number: digits expected after '.'");
  EXPECT_EQ(scalar("1.e5"), "2: invalid number: digits expected after '.'");
  EXPECT_EQ(scalar("1e+"), "3: invalid number: digits expected in exponent");
  EXPECT_EQ(scalar("-"), "0: invalid number");
  EXPECT_EQ(scalar("-Inf"), "0: invalid number");
}

TEST(JsonCursorTest, OtherBadScalars) {
  EXPECT_EQ(scalar(""), "0: expected a value, got end of file");
  EXPECT_EQ(scalar("   "), "3: expected a value, got end of file");
  EXPECT_EQ(scalar("[1]"), "0: expected a scalar value");
  EXPECT_EQ(scalar("nul"), "0: unexpected character 'n'");
  EXPECT_EQ(scalar("undefined"), "0: unexpected character 'u'");
}

TEST(JsonCursorTest, StringEscapes) {
  EXPECT_EQ(scalar(R"("a\"b\\c\/d\b\f\n\r\t")"), "s:a\"b\\c/d\b\f\n\r\t");
  EXPECT_EQ(scalar(R"("\u0041\u00e9\u20AC")"), "s:A\xC3\xA9\xE2\x82\xAC");
  EXPECT_EQ(scalar(R"("\ud83d\ude00")"), "s:\xF0\x9F\x98\x80");  // a surrogate pair
  EXPECT_EQ(scalar("\"caf\xC3\xA9\""), "s:caf\xC3\xA9");            // UTF-8 as it is
  EXPECT_EQ(scalar(R"("")"), "s:");
}

TEST(JsonCursorTest, MalformedStrings) {
  EXPECT_EQ(scalar(R"("abc)"), "1: unterminated string");
  EXPECT_EQ(scalar(R"("ab\)"), "4: unterminated string");
  EXPECT_EQ(scalar(R"("a\x")"), "3: invalid escape '\\x'");
  EXPECT_EQ(scalar(R"("\u12G4")"), "5: invalid \\u escape");
  EXPECT_EQ(scalar(R"("\u12)"), "3: truncated \\u escape");
  EXPECT_EQ(scalar("\"a\nb\""), "2: control character in string");
  EXPECT_EQ(both("5", [](JsonCursor& c) { return c.read_string(); }), "0: expected a string");
}

TEST(JsonCursorTest, ObjectsAndArraysInOrder) {
  EXPECT_EQ(value(R"({"b": [1, "x", null], "a": {}, "c": []})"),
            "{b=[i:1;s:x;null;];a={};c=[];}");
  EXPECT_EQ(value(" [ [ ] , { \"k\" : true } ] "), "[[];{k=true;};]");
}

TEST(JsonCursorTest, MalformedObjectsAndArrays) {
  EXPECT_EQ(value("[1 2]"), "3: expected ',' or ']', got '2'");
  EXPECT_EQ(value("[1,]"), "3: expected a value after ','");
  EXPECT_EQ(value("[1"), "2: expected ',' or ']', got end of file");
  EXPECT_EQ(value(R"({"a" 1})"), "5: expected ':', got '1'");
  EXPECT_EQ(value(R"({"a": 1,})"), "8: expected a key string");
  EXPECT_EQ(value("{1: 2}"), "1: expected a key string");
  EXPECT_EQ(value(R"({"a": 1)"), "7: expected ',' or '}', got end of file");
  EXPECT_EQ(value(R"({"a": 1 "b": 2})"), "8: expected ',' or '}', got '\"'");
}

TEST(JsonCursorTest, NestingIsBoundedAt256Levels) {
  const std::string ok = std::string(256, '[') + std::string(256, ']');
  EXPECT_EQ(value(ok).size(), 256u + 255u + 256u);  // "[[...];]"
  const std::string deep = std::string(257, '[') + std::string(257, ']');
  EXPECT_EQ(value(deep), "257: nesting deeper than 256 levels");
  JsonCursor cur(deep);
  EXPECT_EQ(outcome(cur, [](JsonCursor& c) { return c.raw_value(); }),
            "257: nesting deeper than 256 levels");
}

TEST(JsonCursorTest, RawValueIsTheTextOfOneValue) {
  const auto raw_then_rest = [](JsonCursor& c) {
    c.begin_array();
    c.next_item();
    std::string raw = c.raw_value();
    c.next_item();
    return raw + "|" + walk(c);
  };
  EXPECT_EQ(both(R"([ {"a": [1, "]"], "b": "\"}"} , 7])", raw_then_rest),
            R"({"a": [1, "]"], "b": "\"}"}|i:7)");
  EXPECT_EQ(both("[NaN, 1]", raw_then_rest), "NaN|i:1");
}

TEST(JsonCursorTest, SkipValueLeavesTheCursorAfterIt) {
  const auto skip_first = [](JsonCursor& c) {
    c.begin_array();
    c.next_item();
    c.skip_value();
    return c.next_item() ? describe(c.read_scalar()) : std::string("<no second item>");
  };
  EXPECT_EQ(both(R"([{"x": ["\\", {"y": -1e3}]}, "next"])", skip_first), "s:next");
  EXPECT_EQ(both(R"(["a\"b", 2])", skip_first), "i:2");
  EXPECT_EQ(both(R"(["ab)", skip_first), "4: unterminated string");
}

TEST(JsonCursorTest, PeekConsumeExpectAndAtEnd) {
  JsonCursor cur(" \t\r\n{ } \n");
  EXPECT_FALSE(cur.at_end());
  EXPECT_FALSE(cur.consume('['));
  EXPECT_EQ(cur.peek(), '{');
  EXPECT_EQ(cur.offset(), 4u);
  EXPECT_TRUE(cur.consume('{'));
  cur.expect('}');
  EXPECT_TRUE(cur.at_end());
  EXPECT_EQ(cur.peek(), '\0');
  EXPECT_EQ(outcome(cur, [](JsonCursor& c) { return c.expect(','), std::string(); }),
            "9: expected ',', got end of file");
}

TEST(JsonCursorTest, PositionsAreLinesAndCharacterColumns) {
  const std::string text = "{\n  \"\xC3\xA9\xC3\xA9\": x}";
  JsonCursor cur(text);
  EXPECT_EQ(outcome(cur, [](JsonCursor& c) { return walk(c); }), "12: unexpected character 'x'");
  EXPECT_EQ(cur.position(0).line, 1u);
  EXPECT_EQ(cur.position(0).column, 1u);
  EXPECT_EQ(cur.position(2).line, 2u);
  EXPECT_EQ(cur.position(2).column, 1u);
  const TextPosition x = cur.position(12);
  EXPECT_EQ(x.line, 2u);
  EXPECT_EQ(x.column, 9u);  // each two-byte é is one column
}

TEST(JsonCursorTest, AStreamingCursorCountsLinesOfTheTextItDropped) {
  std::string text = "[";
  for (int i = 0; i < 100; ++i) text += "\n 1,";
  text += "\n x]";
  size_t at = 0;
  JsonCursor cur(
      [&](char* buf, size_t n) {
        const size_t take = std::min(n, text.size() - at);
        std::copy_n(text.data() + at, take, buf);
        at += take;
        return take;
      },
      8);
  EXPECT_EQ(outcome(cur, [](JsonCursor& c) { return walk(c); }), "403: unexpected character 'x'");
  const TextPosition p = cur.position(cur.offset());
  EXPECT_EQ(p.line, 102u);
  EXPECT_EQ(p.column, 2u);
}

TEST(JsonCursorTest, NextValueKindNamesWhatComes) {
  const auto kind = [](const std::string& text) {
    JsonCursor cur(text);
    return next_value_kind(cur);
  };
  EXPECT_EQ(kind("{}"), "an object");
  EXPECT_EQ(kind(" []"), "a list");
  EXPECT_EQ(kind("\"s\""), "a string");
  EXPECT_EQ(kind(""), "end of file");
  EXPECT_EQ(kind("true"), "a boolean");
  EXPECT_EQ(kind("false"), "a boolean");
  EXPECT_EQ(kind("null"), "null");
  EXPECT_EQ(kind("-1"), "a number");
  EXPECT_EQ(kind("NaN"), "a number");
}

}  // namespace
}  // namespace msprobe
