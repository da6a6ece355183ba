// A fresh directory for a test's files, under $TMPDIR (or /tmp), removed with everything in it at the
// end of the scope, even where a test left it or a directory inside it without write permission.
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
        const char* base = std::getenv("TMPDIR");
        std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/" + prefix + "-XXXXXX";
        const char* made = mkdtemp(pattern.data());
        REQUIRE(made != nullptr);
        path = made;
    }
    ~TempDir() {
        std::error_code ignored;  // a destructor reports nothing
        std::filesystem::permissions(path, std::filesystem::perms::owner_all, ignored);
        for (const auto& entry : std::filesystem::recursive_directory_iterator(path, ignored))
            if (entry.is_directory(ignored))
                std::filesystem::permissions(entry.path(), std::filesystem::perms::owner_all, ignored);
        std::filesystem::remove_all(path, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace mpt_test
