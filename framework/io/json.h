// JSON for every file dpt writes or reads back (metrics, summary, checkpoints, safetensors
// headers, timelines), through nlohmann::json (Debian's nlohmann-json3-dev). What is here
// is what the library leaves to its user: strict parsing (no duplicate keys, bounded
// nesting), one-line messages naming the file, the byte and the key, and typed reads that
// refuse a value of the wrong kind instead of converting it (no integer from 2.5 or 1e19).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace dpt::io {

// What dpt writes: keys stay in the order they are set, for the people who read the files.
using JsonOut = nlohmann::ordered_json;
// What dpt reads: keys in a std::map, so a file with millions of keys parses in n log n
// (ordered_json finds a key by linear search: n^2 on a hostile file).
using JsonIn = nlohmann::json;

// `value` as text: one line (indent < 0) or indented by `indent` spaces. Numbers read back
// exactly (doubles in their shortest round-trip form, integers as integers); a non-finite
// number is written as null (JSON has none); bytes that are not UTF-8 become U+FFFD.
// "Shortest" is nlohmann's Grisu2: for about 1 double in 600 it prints 17 digits of a
// value that fewer would name (0.020768 as 0.020767999999999998); it still reads back exactly.
std::string json_text(const JsonOut& value, int indent = -1);

// `value` with every double rounded to 9 significant digits: for measurements people read
// (metrics.jsonl, summary.json), short ("0.282352954", not "0.2823529541492462", but for
// Grisu2's rare long form above) and still exact for a float. Not for what must read back bit for bit
// (checkpoints).
JsonOut json_rounded(JsonOut value);

// Parses one JSON document (RFC 8259, whitespace around it). Throws dpt::Error
// "<source>: malformed JSON at byte N: <why>", N the offset where reading stopped, on a
// syntax error, bytes that are not UTF-8, a duplicate key in an object, nesting deeper than
// 64 levels, or a number beyond the range of a double.
JsonIn json_parse(std::string_view text, const std::string& source);

// Typed reads. `where` names the value in messages, e.g. "step-8.json: key 'position.step'";
// each throws dpt::Error "<where>: expected <kind>, got <what is there>". json_at's key may
// be dotted ("position.step": key "step" of the object at "position").
const JsonIn& json_at(const JsonIn& object, const std::string& key, const std::string& where);
int64_t json_int(const JsonIn& value, const std::string& where);  // an integer literal within int64
double json_number(const JsonIn& value, const std::string& where);
bool json_bool(const JsonIn& value, const std::string& where);
const std::string& json_string(const JsonIn& value, const std::string& where);
const JsonIn::array_t& json_array(const JsonIn& value, const std::string& where);
const JsonIn::object_t& json_object(const JsonIn& value, const std::string& where);

}  // namespace dpt::io
