// The library's own JSON: JsonWriter writes exactly the bytes nlohmann's dump() writes for the same
// values (files must not change), and FlatJson reads what nlohmann reads, refusing what it must.
// The tests may build nlohmann documents; the library does not (see json_writer.h).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "io/flat_json.h"
#include "io/json_writer.h"

using namespace mpt;

TEST_CASE("strings are escaped as nlohmann's dump() escapes them: every byte below 0x80, and UTF-8 as it is") {
    for (int byte = 1; byte < 0x80; ++byte) {
        CAPTURE(byte);
        const std::string text = std::string("a") + static_cast<char>(byte) + "b";
        std::string ours;
        append_json_string(ours, text);
        CHECK(ours == nlohmann::json(text).dump());
    }
    const std::string utf8 = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \"q\" \\ \x7f";
    std::string ours;
    append_json_string(ours, utf8);
    CHECK(ours == nlohmann::json(utf8).dump());
    std::string with_nul;
    append_json_string(with_nul, std::string("x\0y", 3));
    CHECK(with_nul == nlohmann::json(std::string("x\0y", 3)).dump());
}

TEST_CASE("objects, arrays, integers and booleans come out as nlohmann's dump() writes them") {
    JsonWriter writer;
    writer.begin_object()
        .key("a").integer(std::numeric_limits<int64_t>::min())
        .key("b").unsigned_integer(std::numeric_limits<uint64_t>::max())
        .key("c").begin_array().end_array()
        .key("d").begin_object().end_object()
        .key("e").begin_array().integer(0).integer(-7).boolean(true).boolean(false).string("s")
            .begin_object().key("k\n").string("v").end_object().begin_array().unsigned_integer(3).end_array().end_array()
        .end_object();
    nlohmann::ordered_json expected = {{"a", std::numeric_limits<int64_t>::min()},
                                       {"b", std::numeric_limits<uint64_t>::max()},
                                       {"c", nlohmann::ordered_json::array()},
                                       {"d", nlohmann::ordered_json::object()},
                                       {"e", {0, -7, true, false, "s", {{"k\n", "v"}}, {3}}}};
    CHECK(writer.text() == expected.dump());
}

TEST_CASE("FlatJson records every value by its JSON Pointer, containers with their sizes") {
    const FlatJson json = FlatJson::parse(R"({"n":-3,"u":18446744073709551615,"f":1.5,"b":true,"z":null,"s":"x\"y",)"
                                          R"("a":[{"k":1},[]],"o":{"a/b~c":2}})");
    CHECK(json.int64("/n") == -3);
    CHECK(json.find("/u")->unsigned_integer == std::numeric_limits<uint64_t>::max());
    CHECK_THROWS_AS(json.int64("/u"), JsonFormatError);  // out of int64's range
    CHECK(json.find("/f")->type == JsonType::floating);
    CHECK_THROWS_AS(json.int64("/f"), JsonFormatError);
    CHECK(json.boolean("/b"));
    CHECK(json.find("/z")->type == JsonType::null);
    CHECK(json.string("/s") == "x\"y");
    CHECK(json.array_size("/a") == 2);
    CHECK(json.int64("/a/0/k") == 1);
    CHECK(json.array_size("/a/1") == 0);
    CHECK(json.int64("/o/a~1b~0c") == 2);
    CHECK(json.member_names("/o") == std::vector<std::string>{"a/b~c"});
    CHECK(json.member_names("") == std::vector<std::string>{"a", "b", "f", "n", "o", "s", "u", "z"});
    CHECK_THROWS_AS(json.string("/missing"), JsonFormatError);
    CHECK_THROWS_AS(json.uint32("/n"), JsonFormatError);
    CHECK_THROWS_AS(json.require_object("/a"), JsonFormatError);
    // Equal maps are equal JSON: member order and spacing do not matter, structure does.
    CHECK(FlatJson::parse(R"({"x":1,"y":[2]})") == FlatJson::parse(R"( { "y" : [ 2 ] , "x" : 1 } )"));
    CHECK(FlatJson::parse(R"({"x":1,"y":[2]})") != FlatJson::parse(R"({"x":1,"y":[2,3]})"));
    CHECK(FlatJson::parse(R"({"x":{}})") != FlatJson::parse(R"({"x":[]})"));
    CHECK(FlatJson::parse(R"({"x":1})") != FlatJson::parse(R"({"x":"1"})"));
}

TEST_CASE("FlatJson refuses what is not JSON, repeated members, and nesting or names beyond its bounds") {
    for (const char* text : {"", "{", "{\"a\":}", "[1,]", "{} {}", "nul", "{\"a\":1,\"a\":2}", "\"\xff\""}) {
        CAPTURE(text);
        CHECK_THROWS_AS(FlatJson::parse(text), JsonFormatError);
    }
    CHECK_NOTHROW(FlatJson::parse(std::string(FlatJson::max_depth, '[') + std::string(FlatJson::max_depth, ']')));
    CHECK_THROWS_AS(FlatJson::parse(std::string(FlatJson::max_depth + 1, '[') + std::string(FlatJson::max_depth + 1, ']')),
                    JsonFormatError);
    // A long name over many values would store the name once per value.
    std::string long_names = "{\"" + std::string(4096, 'n') + "\":[";
    for (int i = 0; i < 2000; ++i) long_names += i ? ",0" : "0";
    long_names += "]}";
    CHECK_THROWS_AS(FlatJson::parse(long_names), JsonFormatError);
    // Many small values: each costs far more stored than its two bytes of text. The array itself is
    // a value too.
    const auto zeros = [](size_t count) {
        std::string text = "[";
        for (size_t i = 0; i < count; ++i) text += i ? ",0" : "0";
        return text + "]";
    };
    CHECK_NOTHROW(FlatJson::parse(zeros(FlatJson::max_values - 1)));
    CHECK_THROWS_AS(FlatJson::parse(zeros(FlatJson::max_values)), JsonFormatError);
}

TEST_CASE("FlatJson takes out a scalar member as if the text never had it, and leaves containers and absent members") {
    FlatJson json = FlatJson::parse(R"({"optimizer":{"kind":1,"rate":7,"nested":{"x":1},"list":[1]},"top":2})");
    const std::optional<JsonValue> rate = json.take_scalar_member("/optimizer", "rate");
    REQUIRE(rate.has_value());
    CHECK(rate->type == JsonType::unsigned_integer);
    CHECK(rate->unsigned_integer == 7);
    CHECK(json == FlatJson::parse(R"({"optimizer":{"kind":1,"nested":{"x":1},"list":[1]},"top":2})"));
    CHECK_FALSE(json.take_scalar_member("/optimizer", "rate").has_value());    // gone
    CHECK_FALSE(json.take_scalar_member("/optimizer", "nested").has_value());  // an object
    CHECK_FALSE(json.take_scalar_member("/optimizer", "list").has_value());    // an array
    CHECK_FALSE(json.take_scalar_member("/top", "x").has_value());             // no object there
    CHECK_FALSE(json.take_scalar_member("/missing", "kind").has_value());
    CHECK(json == FlatJson::parse(R"({"optimizer":{"kind":1,"nested":{"x":1},"list":[1]},"top":2})"));
    CHECK(json.take_scalar_member("", "top")->unsigned_integer == 2);
    CHECK(json == FlatJson::parse(R"({"optimizer":{"kind":1,"nested":{"x":1},"list":[1]}})"));
    FlatJson with_null = FlatJson::parse(R"({"a":null})");
    const std::optional<JsonValue> null_member = with_null.take_scalar_member("", "a");  // a null is a value
    REQUIRE(null_member.has_value());
    CHECK(null_member->type == JsonType::null);
    CHECK(with_null == FlatJson::parse("{}"));
}
