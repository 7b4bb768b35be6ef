// The readers and writers under checkpoints: JSON values, the safetensors format and
// crash-safe file replacement. Good files round-trip exactly; every kind of damaged file
// (truncated, lying offsets, bad JSON) is a dpt::Error naming the file and what was wrong,
// never a crash or an allocation sized by the damaged header.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>

#include "error_of.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "temp_dir.h"

using namespace dpt;
using namespace dpt::io;
using dpt::testing::error_of;
using dpt::testing::TempDir;
using ::testing::HasSubstr;

namespace {

Tensor f32(const std::vector<float>& values, const Shape& shape) {
  return Tensor::from_vector(values, shape);
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file assembled by hand from a header text and data bytes.
std::string file_of(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

SafetensorsView parse(const std::string& bytes) {
  return parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "f.safetensors");
}

std::string parse_error(const std::string& bytes) {
  return error_of([&] { parse(bytes); });
}

}  // namespace

TEST(Json, ParsesNestedValuesAndReadsTypedFields) {
  JsonIn v = json_parse(
      R"( {"a": [1, -2.5e3, true, null], "b": {"c": "x\"\u00e9\ud83d\ude00"}, "n": -9223372036854775808} )",
      "t.json");
  const auto& a = json_array(json_at(v, "a", "t"), "t");
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(json_int(a[0], "t"), 1);
  EXPECT_EQ(json_number(a[1], "t"), -2500.0);
  EXPECT_TRUE(json_bool(a[2], "t"));
  EXPECT_TRUE(a[3].is_null());
  EXPECT_EQ(json_string(json_at(json_at(v, "b", "t"), "c", "t"), "t"), "x\"\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(json_int(json_at(v, "n", "t"), "t"), std::numeric_limits<int64_t>::min());
  EXPECT_THAT(error_of([&] { json_at(v, "missing", "t.json"); }), HasSubstr("t.json: missing key 'missing'"));
  EXPECT_THAT(error_of([&] { json_int(a[1], "t.json: key 'a'"); }),
              HasSubstr("t.json: key 'a': expected an integer, got -2500.0"));
  EXPECT_THAT(error_of([&] { json_string(a[0], "w"); }), HasSubstr("w: expected a string, got 1"));
  EXPECT_THAT(error_of([&] {
                json_object(v, "w");
                json_array(v, "w");
              }),
              HasSubstr("w: expected an array, got an object"));
}

TEST(Json, IntegersAreExactAndNeverRoundedOrWrapped) {
  // 2^53 + 1 has no double: read as a double on the way, it would come back as 2^53.
  for (int64_t i : {int64_t{0}, int64_t{-7}, (int64_t{1} << 53) + 1, std::numeric_limits<int64_t>::max(),
                    std::numeric_limits<int64_t>::min()}) {
    const std::string text = json_text(JsonOut{{"i", i}});
    EXPECT_EQ(json_int(json_at(json_parse(text, "t"), "i", "t"), "t"), i) << text;
  }
  // Beyond int64, or written as a fraction or with an exponent: an error naming the value.
  for (const char* text :
       {"9223372036854775808", "18446744073709551616", "-9223372036854775809", "1.0", "1e3"})
    EXPECT_THAT(error_of([&] { json_int(json_parse(text, "t"), "k"); }),
                HasSubstr("k: expected an integer, got "))
        << text;
}

TEST(Json, DoublesAndStringsRoundTripExactly) {
  const double values[] = {0.1,    -1.0 / 3.0,
                           1e-300, 6.02214076e23,
                           5e-324, std::numeric_limits<double>::max(),
                           0.0,    static_cast<double>(0.1f)};
  for (double d : values) {
    const std::string text = json_text(JsonOut(d));
    EXPECT_EQ(json_number(json_parse(text, "t"), "t"), d) << text;
  }
  EXPECT_EQ(json_text(JsonOut{{"nan", std::nan("")}, {"inf", HUGE_VAL}}), R"({"nan":null,"inf":null})");
  JsonOut o = {{"k", "line\nbreak \x01"}, {"l", {1, "two"}}};
  EXPECT_EQ(json_text(o), R"({"k":"line\nbreak \u0001","l":[1,"two"]})");  // insertion order kept
  EXPECT_EQ(json_string(json_at(json_parse(json_text(o), "t"), "k", "t"), "t"), "line\nbreak \x01");
  EXPECT_EQ(json_text(JsonOut("a\xff")), "\"a\xef\xbf\xbd\"");  // not UTF-8: U+FFFD, never an exception
}

TEST(Json, MalformedTextNamesTheByte) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "byte 0: syntax error while parsing value - unexpected end of input"},
      {"{\"a\": 1,}", "byte 8: syntax error while parsing object key - unexpected '}'"},
      {"[1 2]", "byte 3: syntax error while parsing array - unexpected number literal; expected ']'"},
      {"{\"a\": 1, \"a\": 2}", "byte 11: duplicate key \"a\""},
      {"{\"a\": {\"b\": 1, \"c\": {\"b\": 2}, \"b\": 3}}", "byte 32: duplicate key \"b\""},
      {"\"tab\there\"",
       "byte 4: syntax error while parsing value - invalid string: control character U+0009"},
      {"\"\\x\"",
       "byte 2: syntax error while parsing value - invalid string: forbidden character after backslash"},
      {"\"\\ud800\"", "byte 7: syntax error while parsing value - invalid string: surrogate U+D800..U+DBFF"},
      {"\"\xff\"", "byte 1: syntax error while parsing value - invalid string: ill-formed UTF-8 byte"},
      {"01", "byte 1: syntax error while parsing value - unexpected number literal; expected end of input"},
      {"1.", "byte 2: syntax error while parsing value - invalid number; expected digit after '.'"},
      {"tru", "byte 3: syntax error while parsing value - invalid literal"},
      {"\"open", "byte 5: syntax error while parsing value - invalid string: missing closing quote"},
      {"{} x", "byte 3: syntax error while parsing value - invalid literal"},
      {"[1e400]", "byte 6: number overflow parsing '1e400'"},
  };
  for (const auto& [text, expected] : cases)
    EXPECT_THAT(error_of([&] { json_parse(text, "bad.json"); }),
                HasSubstr(std::string("bad.json: malformed JSON at ") + expected))
        << text;
  // A long damaged token is quoted in part: the message stays one short line.
  const std::string message =
      error_of([&] { json_parse("\"" + std::string(100000, 'x') + "\x01\"", "long.json"); });
  EXPECT_THAT(message, HasSubstr("long.json: malformed JSON at byte 100001: syntax error"));
  EXPECT_LT(message.size(), 300u) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(Json, DeepNestingIsAnErrorNotAStackOverflow) {
  std::string deep(100000, '[');
  EXPECT_THAT(error_of([&] { json_parse(deep, "deep.json"); }),
              HasSubstr("deep.json: malformed JSON at byte 64: nested deeper than 64 levels"));
  std::string objects;
  for (int i = 0; i < 100; ++i) objects += "{\"k\": ";
  EXPECT_THAT(error_of([&] { json_parse(objects, "deep.json"); }), HasSubstr("nested deeper than 64 levels"));
  std::string ok = std::string(64, '[') + std::string(64, ']');
  EXPECT_NO_THROW(json_parse(ok, "ok.json"));
}

TEST(Safetensors, WritesTheFormatAndReadsItBack) {
  TempDir dir("dpt_safetensors");
  Tensor w = f32({1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f}, {2, 3});
  Tensor idx = Tensor::from_vector(std::vector<int64_t>{-1, 1LL << 40, 7}, {3});
  Tensor scalar = Tensor::full({}, 42.0f);
  const std::string path = dir.file("m.safetensors");
  safetensors_write(path, {{"w", w}, {"idx", idx}, {"s", scalar}}, {{"format", "pt"}});

  // The layout, checked byte by byte: length prefix, JSON header padded to 8, raw data.
  std::string bytes = read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  ASSERT_EQ((8 + n) % 8, 0u);
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
            R"("idx":{"dtype":"I64","shape":[3],"data_offsets":[24,48]},)"
            R"("s":{"dtype":"F32","shape":[],"data_offsets":[48,52]}})");
  ASSERT_EQ(bytes.size(), 8 + n + 52);
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n, w.raw_data(), 24), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n + 24, idx.raw_data(), 24), 0);

  SafetensorsFile f = safetensors_read(path);
  ASSERT_EQ(f.view.tensors.size(), 3u);
  std::vector<std::string> names;
  for (const SafetensorsEntry& e : f.view.tensors) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"w", "idx", "s"}));  // the data's order, not the keys'
  EXPECT_EQ(f.view.metadata, (Metadata{{"format", "pt"}}));
  EXPECT_EQ(f.tensor(*f.view.find("w")).to_vector(), w.to_vector());
  Tensor idx_back = f.tensor(*f.view.find("idx"));
  EXPECT_EQ(std::vector<int64_t>(idx_back.data<int64_t>(), idx_back.data<int64_t>() + 3),
            (std::vector<int64_t>{-1, 1LL << 40, 7}));
  EXPECT_EQ(f.tensor(*f.view.find("s")).item(), 42.0f);
}

TEST(Safetensors, NonContiguousTensorsAreWrittenRowMajor) {
  TempDir dir("dpt_safetensors");
  Tensor t = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor transposed = t.as_strided({3, 2}, {1, 3}, 0);  // [[1,4],[2,5],[3,6]]
  safetensors_write(dir.file("t.safetensors"), {{"t", transposed}});
  SafetensorsFile f = safetensors_read(dir.file("t.safetensors"));
  EXPECT_EQ(f.tensor(f.view.tensors[0]).to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Safetensors, DamagedFilesAreClearErrors) {
  const std::string entry = R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
  const std::string data(8, '\0');
  ASSERT_NO_THROW(parse(file_of(entry, data)));
  const std::pair<std::string, std::string> cases[] = {
      {"abc", "f.safetensors: 3 bytes is too short"},
      {le64(1000) + entry + data, "header length 1000 reaches past the end of the"},
      {le64(1ULL << 40) + entry, "header length 1099511627776 is over the format's limit"},
      {file_of("{\"a\": ", ""), "f.safetensors (header): malformed JSON at byte 6"},
      {file_of("[1]", ""), "f.safetensors: header: expected an object, got an array"},
      {file_of(R"({"a": {"shape": [2], "data_offsets": [0, 8]}})", data), "tensor 'a': missing key 'dtype'"},
      {file_of(R"({"a": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}})", data),
       "unknown dtype 'F33'"},
      {file_of(R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", data),
       "negative dimension -2"},
      {file_of(R"({"a": {"dtype": "F32", "shape": [4611686018427387904, 8], "data_offsets": [0, 8]}})", data),
       "too large to exist"},
      {file_of(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", data),
       "tensor 'a': shape [3] of F32 needs 12 bytes, but data_offsets [0, 8] hold 8"},
      {file_of(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", data),
       "not an ordered pair"},
      {file_of(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", data),
       "data_offsets [0, 16] reach past the 8 bytes of data in the file (truncated?)"},
      {file_of(
           R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
           data),
       "tensors 'a' and 'b' overlap"},
      {file_of(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", data),
       "bytes 0..4 of the data belong to no tensor"},
      {file_of(entry, data + "xyz"), "3 bytes after the last tensor"},
      {file_of(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1}})", data),
       "unexpected key 'x'"},
      {file_of(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", data),
       "must be [begin, end]"},
      {file_of(R"({"__metadata__": {"k": 1}})", ""), "__metadata__ 'k': expected a string, got 1"},
  };
  for (const auto& [bytes, expected] : cases)
    EXPECT_THAT(parse_error(bytes), HasSubstr(expected)) << expected;
}

TEST(Safetensors, EveryTruncationAndRandomCorruptionIsAnErrorOrAValidFile) {
  TempDir dir("dpt_safetensors");
  safetensors_write(dir.file("m.safetensors"), {{"w", f32({1, 2, 3, 4}, {2, 2})}, {"b", f32({5, 6}, {2})}});
  const std::string good = read_file(dir.file("m.safetensors"));
  for (size_t n = 0; n < good.size(); ++n) EXPECT_THROW(parse(good.substr(0, n)), Error) << "prefix of " << n;
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bad = good;
    for (int k = 0; k < 3; ++k) bad[rng() % bad.size()] = static_cast<char>(rng());
    try {
      SafetensorsView v = parse(bad);
      for (const auto& e : v.tensors) EXPECT_LE(e.end, v.data_size);  // whatever parses stays inside the data
    } catch (const Error&) {
    }
  }
}

TEST(Safetensors, LoadIntoChecksNamesShapesAndDtypesBeforeCopying) {
  TempDir dir("dpt_safetensors");
  const std::string path = dir.file("m.safetensors");
  safetensors_write(path, {{"w", f32({1, 2, 3, 4}, {2, 2})}, {"b", f32({5, 6}, {2})}});
  SafetensorsFile f = safetensors_read(path);
  Tensor w = Tensor::zeros({2, 2}), b = Tensor::zeros({2});
  safetensors_load_into(f, {{"w", w}, {"b", b}}, "the model");
  EXPECT_EQ(w.to_vector(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(b.to_vector(), (std::vector<float>{5, 6}));

  Tensor untouched = Tensor::zeros({2, 2});
  EXPECT_THAT(error_of([&] {
                safetensors_load_into(f, {{"w", untouched}, {"b", Tensor::zeros({3})}}, "the model");
              }),
              HasSubstr(path + ": tensor 'b' has shape [2], the model expects [3]"));
  EXPECT_EQ(untouched.to_vector(), (std::vector<float>(4, 0.0f)));  // nothing copied before the check failed
  EXPECT_THAT(error_of([&] {
                safetensors_load_into(f, {{"w", w}, {"b", b}, {"c", b}}, "the model");
              }),
              HasSubstr(path + ": no tensor 'c', which the model has"));
  EXPECT_THAT(error_of([&] {
                safetensors_load_into(f, {{"w", w}}, "the model");
              }),
              HasSubstr(path + ": tensor 'b' is not part of the model"));
  safetensors_load_into(f, {{"w", w}}, "the model", [](const std::string& name) { return name == "b"; });
  Tensor as_i64 = Tensor::zeros({2}, DType::i64);
  EXPECT_THAT(error_of([&] {
                safetensors_load_into(f, {{"w", w}, {"b", as_i64}}, "the model");
              }),
              HasSubstr("tensor 'b' is F32, the model expects I64"));
}

// Every check, the one for tensors `into` lacks included, comes before the first copy: a
// file that fails any of them leaves `into` bit-identical.
TEST(Safetensors, LoadIntoLeavesTheTargetUntouchedWhateverCheckFails) {
  TempDir dir("dpt_safetensors");
  const std::string path = dir.file("m.safetensors");
  safetensors_write(path,
                    {{"w", f32({1, 2, 3, 4}, {2, 2})}, {"b", f32({5, 6}, {2})}, {"extra", f32({7}, {1})}});
  SafetensorsFile f = safetensors_read(path);
  Tensor w = f32({-1, -2, -3, -4}, {2, 2}), b = f32({-5, -6}, {2});
  EXPECT_EQ(
      error_of([&] {
        safetensors_load_into(f, {{"w", w}, {"b", b}}, "the model");
      }),
      path + ": tensor 'extra' is not part of the model (a checkpoint of another model or configuration?)");
  EXPECT_EQ(w.to_vector(), (std::vector<float>{-1, -2, -3, -4}));
  EXPECT_EQ(b.to_vector(), (std::vector<float>{-5, -6}));
  safetensors_load_into(f, {{"w", w}, {"b", b}}, "the model",
                        [](const std::string& name) { return name == "extra"; });
  EXPECT_EQ(w.to_vector(), (std::vector<float>{1, 2, 3, 4}));
}

TEST(AtomicFile, AFailedWriteLeavesTheOldContentAndNoTemporary) {
  TempDir dir("dpt_atomic");
  const std::string path = dir.file("ckpt.bin");
  write_file_atomic(path, {"old ", "content"});
  EXPECT_EQ(read_file(path), "old content");
  // The temporary file is a link to /dev/full: every write to it fails with ENOSPC, as on
  // a full disk.
  ASSERT_EQ(::symlink("/dev/full", (path + ".tmp").c_str()), 0);
  std::string message = error_of([&] { write_file_atomic(path, {std::string(1 << 20, 'x')}); });
  EXPECT_THAT(message, HasSubstr(path + ".tmp: cannot write: No space left on device"));
  EXPECT_THAT(message, HasSubstr(path + " is unchanged"));
  EXPECT_EQ(read_file(path), "old content");
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(path + ".tmp")));
  write_file_atomic(path, {"new"});
  EXPECT_EQ(read_file(path), "new");
  EXPECT_THAT(error_of([&] { write_file_atomic(dir.file("no/such/dir/f"), {"x"}); }),
              HasSubstr("cannot create: No such file or directory"));
}

TEST(AtomicFile, AppendedLinesArriveWholeOrNotAtAll) {
  TempDir dir("dpt_atomic");
  const std::string path = dir.file("metrics.jsonl");
  append_line(path, "{\"epoch\":1}");
  append_line(path, "{\"epoch\":2}");
  EXPECT_EQ(read_file(path), "{\"epoch\":1}\n{\"epoch\":2}\n");
  // A full disk: the file keeps its two lines, no half third one.
  ASSERT_EQ(::symlink("/dev/full", (path + ".tmp").c_str()), 0);
  EXPECT_THAT(error_of([&] { append_line(path, "{\"epoch\":3}"); }),
              HasSubstr(path + ".tmp: cannot write: No space left on device"));
  EXPECT_EQ(read_file(path), "{\"epoch\":1}\n{\"epoch\":2}\n");
}
