// Unit tests of the CLI's pure parts (simba_cli_core, no server): --help.
#include <gtest/gtest.h>

#include "cli.hpp"

namespace {

using namespace std::chrono_literals;

// ---------------------------------------------------------------- help

TEST(Help, EachCommandHasItsOwnTextAndAnythingElseTheOverview) {
    for (const char* command : {"run", "status", "acquire", "release", "owner", "metrics", "top"}) {
        const std::string text = simba::cli::help_for(command);
        EXPECT_EQ(text.rfind(std::string("usage: simba ") + command + " ", 0), 0u) << text;
    }
    const std::string overview = simba::cli::help_for("");
    EXPECT_EQ(overview.rfind("usage: simba COMMAND [options]\n", 0), 0u) << overview;
    EXPECT_EQ(std::string(simba::cli::help_for("nope")), overview);
    EXPECT_NE(overview.find("  top       a live view"), std::string::npos);
}

}  // namespace
