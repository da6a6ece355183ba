// A fresh directory under /tmp for a test's files, removed with everything in it at the end of the
// scope.
#pragma once

#include <doctest/doctest.h>

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace mpt_test {

struct TempDir {
    std::filesystem::path path;

    explicit TempDir(const std::string& prefix = "mptrain-test") {
        std::string pattern = "/tmp/" + prefix + "-XXXXXX";
        const char* made = mkdtemp(pattern.data());
        REQUIRE(made != nullptr);
        path = made;
    }
    ~TempDir() {
        std::error_code ignored;  // a destructor reports nothing
        std::filesystem::remove_all(path, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace mpt_test
