// simba: the command-line tool. `simba --help` lists the commands; each has
// its own --help. Connection: --dsn, else libpq's environment (PGHOST, ...).
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>

#include <CLI/CLI.hpp>

#include "cli.hpp"
#include "simba/errors.hpp"

namespace {

using namespace simba::cli;

const char* const kCommands[] = {"run", "status", "acquire", "release", "owner", "metrics", "top"};

/// The commands and their options, parsed into `a`; the texts --help prints
/// are help_for()'s.
struct Parser {
    CLI::App app{"A distributed mutex / leader election service inside PostgreSQL.", "simba"};
    std::map<std::string, CLI::App*> commands;
    CLI::App* help = nullptr;
    std::string help_topic;
    bool version = false;

    explicit Parser(Args& a) {
        // A repeated option: the last one counts, as in most tools.
        app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
        app.require_subcommand(0, 1);
        // `simba --dsn DSN COMMAND ...` works like `simba COMMAND --dsn DSN ...`.
        app.add_option("-d,--dsn", a.dsn);
        app.add_flag("--version", version);
        help = app.add_subcommand("help");
        help->add_option("COMMAND", help_topic);
        for (const char* name : kCommands) {
            CLI::App* c = app.add_subcommand(name);
            c->add_option("-d,--dsn", a.dsn);
            commands[name] = c;
        }
        auto* run = commands["run"];
        run->add_option("-m,--mutex", a.mutex);
        run->add_option("-c,--contender", a.contender);
        run->add_option("--ttl", a.ttl);
        run->add_option("--transition", a.transition);
        run->add_option("-w,--wait", a.wait);
        run->add_option("--grace", a.grace);
        run->add_option("--metrics-file", a.metrics_file);
        run->add_option("--metrics-interval", a.metrics_interval);
        run->add_flag("-v,--verbose", a.verbose);
        // CMD starts at the first word that is not an option: it and all
        // after it are CMD's (remaining()), even words that look like ours.
        run->prefix_command();
        auto* status = commands["status"];
        status->add_flag("-j,--json", a.json);
        status->add_flag("-W,--watch", a.watch);
        status->add_option("-i,--interval", a.interval);
        status->add_option("-m,--mutex", a.mutex);
        for (const char* name : {"status", "top"}) {
            commands[name]->add_flag("-a,--all", a.all);
            commands[name]->add_option("-p,--pattern", a.pattern);
            commands[name]->add_option("--recent", a.recent);
        }
        auto* acquire = commands["acquire"];
        acquire->add_option("-m,--mutex", a.mutex);
        acquire->add_option("-c,--contender", a.contender);
        acquire->add_option("--ttl", a.ttl);
        acquire->add_option("--transition", a.transition);
        acquire->add_flag("-j,--json", a.json);
        auto* release = commands["release"];
        release->add_option("-m,--mutex", a.mutex);
        release->add_option("-c,--contender", a.contender);
        release->add_flag("-f,--force", a.force);
        auto* owner = commands["owner"];
        owner->add_option("-m,--mutex", a.mutex);
        owner->add_flag("-j,--json", a.json);
        commands["metrics"]->add_option("-l,--listen", a.listen);
        commands["top"]->add_option("-i,--interval", a.interval);
        commands["top"]->add_option("-s,--sort", a.sort);
    }

    /// The command on the command line ("" if none), also after a parse error.
    [[nodiscard]] std::string command() const {
        for (auto& [name, c] : commands)
            if (c->parsed()) return name;
        return {};
    }
};

int usage_error(const std::string& command, const std::string& what) {
    const std::string prefix = command.empty() ? "simba" : "simba " + command;
    std::fprintf(stderr, "%s: %s\nTry '%s --help'.\n", prefix.c_str(), what.c_str(), prefix.c_str());
    return usage;
}

/// Runs the command; what it throws becomes its message on stderr and the exit code.
int dispatch(const std::string& command, const Args& a) {
    try {
        if (command == "run") return cmd_run(a);
        if (command == "status") return cmd_status(a);
        if (command == "acquire") return cmd_acquire(a);
        if (command == "release") return cmd_release(a);
        if (command == "owner") return cmd_owner(a);
        if (command == "top") return cmd_top(a);
        return cmd_metrics(a);
    } catch (const UsageError& e) {
        std::string what = e.what();
        // The commands' messages often name the command already.
        const std::string named = "simba " + command + ": ";
        if (what.rfind(named, 0) == 0) what.erase(0, named.size());
        return usage_error(command, what);
    } catch (const Failure& e) {
        std::fprintf(stderr, "simba %s: %s\n", command.c_str(), e.what());
        return e.code;
    } catch (const simba::InvalidArgumentError& e) {
        return usage_error(command, e.what());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "simba %s: %s\n", command.c_str(), e.what());
        return software;
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> words(argv + 1, argv + argc);
    if (words.empty()) {
        std::fputs(help_for(""), stderr);
        return usage;
    }
    // What follows the first `--` is run's CMD. CLI11 keeps the words from
    // CMD's first one on (prefix_command) but gives a `--` before CMD to the
    // top level, so it is split off here: a `--` after CMD's first word is
    // one of CMD's arguments and goes back in its place.
    std::optional<std::vector<std::string>> after_separator;
    if (auto dd = std::find(words.begin(), words.end(), "--"); dd != words.end()) {
        after_separator.emplace(dd + 1, words.end());
        words.erase(dd, words.end());
    }
    Args a;
    Parser p(a);
    std::string command;
    try {
        std::reverse(words.begin(), words.end());  // CLI11 takes them last first
        p.app.parse(words);
        command = p.command();
        if (command == "run") {
            a.cmd = p.commands["run"]->remaining();
            // prefix_command() passes an unknown option on too: CMD is never one.
            if (!a.cmd.empty() && a.cmd[0].size() > 1 && a.cmd[0][0] == '-')
                return usage_error(command, "unknown option " + a.cmd[0]);
            if (after_separator) {
                if (!a.cmd.empty()) a.cmd.emplace_back("--");
                a.cmd.insert(a.cmd.end(), after_separator->begin(), after_separator->end());
            }
        } else if (after_separator) {
            return usage_error(command, "takes no command after --");
        }
    } catch (const CLI::CallForHelp&) {
        std::fputs(help_for(p.command()), stdout);
        return ok;
    } catch (const CLI::ExtrasError& e) {
        command = p.command();
        const auto extra = p.app.remaining();
        if (command.empty() && !extra.empty() && extra[0].rfind('-', 0) != 0)
            return usage_error("", "unknown command \"" + extra[0] + "\"");
        return usage_error(command, e.what());
    } catch (const CLI::ParseError& e) {
        return usage_error(p.command(), e.what());
    }
    if (p.version) {
        std::puts("simba " SIMBA_VERSION);  // the release (client/CMakeLists.txt)
        return ok;
    }
    if (*p.help) {
        std::fputs(help_for(p.help_topic), stdout);
        return ok;
    }
    if (command.empty()) {
        std::fputs(help_for(""), stderr);
        return usage;
    }
    return dispatch(command, a);
}
