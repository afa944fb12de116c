// simba CLI: `simba top` — a live view of the mutexes (holders, time left,
// fences), the semaphores and the latest changes of hands, redrawn every
// --interval; sortable, quits on q. Plain ANSI escapes on the terminal (no
// curses); one table and exit when stdout is not a terminal.
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <deque>
#include <map>
#include <sstream>

#include "cli.hpp"

namespace simba::cli {

namespace {

using std::chrono::microseconds;

struct MutexRow {
    std::string mutex, owner, state;
    double left = 0;  // seconds, 0 when free
    long long fence = 0;
    long long waiting = 0;  // live fair waiters
};

struct Screen {
    std::vector<MutexRow> mutexes;
    std::vector<std::string> rwlocks;     // one line per lock, drawn as is
    std::vector<std::string> semaphores;  // one line per key, drawn as is
    std::vector<std::string> sessions;    // one line per session, drawn as is
    std::string not_shown;                // what the filter left out
    std::deque<std::string> handoffs;     // newest first
    bool from_history = false;
    std::string error;                    // the last refresh failed: why
};

const char* const kSortNames[] = {"mutex", "owner", "state", "time left", "fence"};
constexpr int kSorts = 5;

int parse_sort(const std::optional<std::string>& s) {
    if (!s) return 0;
    for (int i = 0; i < kSorts; ++i)
        if (*s == kSortNames[i] || (i == 3 && *s == "left")) return i;
    throw UsageError("--sort wants mutex, owner, state, left or fence, not \"" + *s + "\"");
}

std::string clock_time(std::time_t t) {
    char buf[16];
    std::tm tm{};
    ::localtime_r(&t, &tm);
    std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
    return buf;
}

/// Reads the server's state; changes of hands come from simba_mutex_history
/// when it is on and readable, else from what this view saw change between
/// refreshes (a fence that moved: a new tenure).
class Reader {
public:
    Reader(std::string dsn, ViewFilter filter) : dsn_(std::move(dsn)), filter_(std::move(filter)) {}

    Screen read() {
        Screen s;
        try {
            if (!conn_) conn_ = connect(dsn_, "simba-top");
            AnswerDeadline deadline(*conn_);
            const StatusSnapshot snap = read_snapshot(*conn_, filter_);
            for (auto r : snap.mutexes)
                s.mutexes.push_back({str(r[0]), str(r[1]), str(r[2]), num(r[3]), r[4].as<long long>(0),
                                     r[9].as<long long>(0)});
            for (auto r : snap.rwlocks)
                s.rwlocks.push_back(pad(str(r[0]), 24) + "  " + pad(str(r[1]), 5) + "  " +
                                    pad(r[2].is_null() ? "-" : str(r[2]), 24) + "  " + str(r[3]) +
                                    " waiting writers  fence " + str(r[4]));
            std::map<std::string, std::pair<int, std::string>> keys;
            for (auto r : snap.semaphores) {
                auto& k = keys[str(r[0])];
                ++k.first;
                k.second = str(r[6]);
            }
            for (auto& [key, k] : keys)
                s.semaphores.push_back(pad(key, 24) + "  " + std::to_string(k.first) + " of " + k.second +
                                       " permits held");
            for (auto r : snap.sessions)
                s.sessions.push_back(str(r[0]) + "  " + pad(str(r[1]), 12) + "  " + pad(str(r[2]), 10) + "  " +
                                     pad(r[3].is_null() ? "-"
                                                        : format_duration(microseconds(
                                                              static_cast<std::int64_t>(num(r[3]) * 1e6))),
                                         9) +
                                     "  " + str(r[4]) + " mutexes, " + str(r[5]) + " permits, " + str(r[6]) +
                                     " rwlocks");
            s.not_shown = hidden_note(snap);
            pqxx::nontransaction tx(*conn_);
            if (tx.exec1("SELECT coalesce(current_setting('simba.history', true), 'off') = 'on'")[0].as<bool>()) {
                s.from_history = true;
                for (auto r : tx.exec("SELECT extract(epoch FROM at)::float8, mutex, event, coalesce(owner_id, '-'),"
                                      " coalesce(previous_owner, ''), fence FROM simba_mutex_history"
                                      " ORDER BY id DESC LIMIT 20")) {
                    std::string line = clock_time(static_cast<std::time_t>(num(r[0]))) + "  " + pad(str(r[1]), 20) +
                                       "  " + pad(str(r[2]), 14) + "  " + str(r[3]);
                    if (!str(r[4]).empty()) line += " (from " + str(r[4]) + ")";
                    s.handoffs.push_back(line + "  fence " + str(r[5]));
                }
            }
        } catch (const std::exception& e) {
            // Shown on the screen, and the next refresh connects again.
            s.error = e.what();
            s.error = s.error.substr(0, s.error.find('\n'));
            conn_.reset();
            s.mutexes = last_;
            s.handoffs = seen_;
            return s;
        }
        if (!s.from_history) {
            observe(s.mutexes);
            s.handoffs = seen_;
        }
        last_ = s.mutexes;
        return s;
    }

private:
    void observe(const std::vector<MutexRow>& now) {
        const std::string at = clock_time(std::time(nullptr));
        for (auto& m : now) {
            auto it = fences_.find(m.mutex);
            if (it != fences_.end() && m.fence != it->second.first && m.state != "free")
                seen_.push_front(at + "  " + pad(m.mutex, 20) + "  " + pad("new holder", 14) + "  " + m.owner +
                                 "  fence " + std::to_string(m.fence));
            else if (it != fences_.end() && it->second.second != "free" && m.state == "free")
                seen_.push_front(at + "  " + pad(m.mutex, 20) + "  " + pad("freed", 14));
            fences_[m.mutex] = {m.fence, m.state};
        }
        while (seen_.size() > 20) seen_.pop_back();
    }

    const std::string dsn_;
    const ViewFilter filter_;
    std::unique_ptr<pqxx::connection> conn_;
    std::vector<MutexRow> last_;
    std::map<std::string, std::pair<long long, std::string>> fences_;
    std::deque<std::string> seen_;
};

void sort_rows(std::vector<MutexRow>& rows, int by, bool reverse) {
    auto key = [by](const MutexRow& r) {
        switch (by) {
            case 1: return std::make_tuple(r.owner, 0.0, r.mutex);
            case 2: return std::make_tuple(r.state, 0.0, r.mutex);
            case 3: return std::make_tuple(std::string(), r.left, r.mutex);
            case 4: return std::make_tuple(std::string(), static_cast<double>(r.fence), r.mutex);
            default: return std::make_tuple(r.mutex, 0.0, std::string());
        }
    };
    std::stable_sort(rows.begin(), rows.end(), [&](const MutexRow& a, const MutexRow& b) {
        return reverse ? key(b) < key(a) : key(a) < key(b);
    });
}

/// The view as lines; at most `height` of them when height > 0.
std::vector<std::string> render(Screen s, int sort, bool reverse, bool live, int height) {
    std::vector<std::string> out;
    sort_rows(s.mutexes, sort, reverse);
    std::size_t held = 0, wm = 5, wo = 5;
    for (auto& m : s.mutexes) {
        held += m.state != "free";
        wm = std::max(wm, m.mutex.size());
        wo = std::max(wo, m.owner.size());
    }
    if (live) {
        out.push_back("simba top  " + clock_time(std::time(nullptr)) + "  " + std::to_string(held) + " held, " +
                      std::to_string(s.mutexes.size() - held) + " free shown  sorted by " + kSortNames[sort] +
                      (reverse ? " (reversed)" : "") + "  [s] sort  [r] reverse  [q] quit");
        if (!s.error.empty()) out.push_back("database unreachable, showing the last state: " + s.error);
    }
    if (!s.not_shown.empty()) out.push_back(s.not_shown);
    if (live || !s.not_shown.empty()) out.emplace_back();
    out.push_back(pad("MUTEX", wm) + "  " + pad("OWNER", wo) + "  " + pad("STATE", 10) + "  " + pad("TIME LEFT", 9) +
                  "  " + pad("FENCE", 6) + "  WAITING");
    std::vector<std::string> tail;
    auto section = [&tail](const std::string& title, const std::vector<std::string>& rows) {
        if (rows.empty()) return;
        tail.emplace_back();
        tail.push_back(title);
        tail.insert(tail.end(), rows.begin(), rows.end());
    };
    section("READ-WRITE LOCK           MODE   HOLDERS", s.rwlocks);
    section("SEMAPHORE", s.semaphores);
    section("SESSION", s.sessions);
    // Once, a view has seen nothing change: only the history has something to say.
    if (live || s.from_history) {
        tail.emplace_back();
        tail.push_back(std::string("RECENT CHANGES OF HANDS") +
                       (s.from_history ? " (simba_mutex_history)" : " (seen by this view; simba.history is off)"));
        if (s.handoffs.empty()) tail.push_back("(none yet)");
    }
    // Room for the mutexes: what the screen leaves after the header and at
    // least the first lines of the rest.
    std::size_t rows = s.mutexes.size();
    if (height > 0) {
        const int fixed = static_cast<int>(out.size()) + static_cast<int>(std::min<std::size_t>(tail.size() + 3, 12));
        rows = std::min(rows, static_cast<std::size_t>(std::max(1, height - fixed)));
    }
    for (std::size_t i = 0; i < rows; ++i) {
        auto& m = s.mutexes[i];
        const std::string left =
            m.state == "free" ? "-" : format_duration(microseconds(static_cast<std::int64_t>(m.left * 1e6)));
        out.push_back(pad(m.mutex, wm) + "  " + pad(m.owner.empty() ? "-" : m.owner, wo) + "  " + pad(m.state, 10) +
                      "  " + pad(left, 9) + "  " + pad(std::to_string(m.fence), 6) + "  " + std::to_string(m.waiting));
    }
    if (rows < s.mutexes.size()) out.push_back("... " + std::to_string(s.mutexes.size() - rows) + " more");
    if (s.mutexes.empty()) out.push_back("(no mutexes held, waited for or changed lately)");
    out.insert(out.end(), tail.begin(), tail.end());
    out.insert(out.end(), s.handoffs.begin(), s.handoffs.end());
    if (height > 0 && static_cast<int>(out.size()) > height) out.resize(height);
    return out;
}

/// The terminal in raw mode on the alternate screen while it lives.
class Terminal {
public:
    Terminal() {
        ::tcgetattr(STDIN_FILENO, &saved_);
        termios raw = saved_;
        raw.c_lflag &= ~(ICANON | ECHO);
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        ::tcsetattr(STDIN_FILENO, TCSANOW, &raw);
        std::fputs("\x1b[?1049h\x1b[?25l", stdout);  // alternate screen, cursor hidden
    }
    ~Terminal() {
        std::fputs("\x1b[?25h\x1b[?1049l", stdout);
        std::fflush(stdout);
        ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
    }
    Terminal(const Terminal&) = delete;
    Terminal& operator=(const Terminal&) = delete;

    static std::pair<int, int> size() {
        winsize w{};
        if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) != 0 || w.ws_row == 0) return {24, 80};
        return {w.ws_row, w.ws_col};
    }

private:
    termios saved_{};
};

}  // namespace

int cmd_top(const Args& a) {
    const auto interval = parse_duration(a.interval.value_or("1s"), "--interval");
    if (interval.count() <= 0) throw UsageError("--interval must be greater than 0");
    int sort = parse_sort(a.sort);
    bool reverse = false;
    Reader reader(a.dsn, view_filter(a));
    // A setup mistake (no server, no extension, no grant) ends it at once, as the other commands do.
    {
        auto conn = connect(a.dsn, "simba-top");
        AnswerDeadline deadline(*conn);
        try {
            pqxx::nontransaction(*conn).exec("SELECT 1 FROM simba_mutex_status LIMIT 0");
        } catch (const pqxx::failure& e) {
            fail_sql(e, "reading simba_mutex_status");
        }
    }
    if (!::isatty(STDOUT_FILENO) || !::isatty(STDIN_FILENO)) {
        for (auto& line : render(reader.read(), sort, reverse, false, 0)) std::printf("%s\n", line.c_str());
        return ok;
    }

    // SIGINT and SIGTERM end the view like q does (the terminal is restored).
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    Terminal term;
    auto next = std::chrono::steady_clock::now();
    Screen screen;
    for (bool redraw = true;;) {
        if (std::chrono::steady_clock::now() >= next) {
            screen = reader.read();
            next = std::chrono::steady_clock::now() + interval;
            redraw = true;
        }
        if (redraw) {
            const auto [height, width] = Terminal::size();
            std::string frame = "\x1b[H\x1b[2J";
            for (auto& line : render(screen, sort, reverse, true, height)) {
                frame += line.substr(0, static_cast<std::size_t>(width));
                frame += "\r\n";
            }
            frame.resize(frame.size() - 2);  // no newline after the last line: it would scroll
            std::fputs(frame.c_str(), stdout);
            std::fflush(stdout);
            redraw = false;
        }
        timespec zero{0, 0};
        if (sigtimedwait(&stop, nullptr, &zero) > 0) return ok;
        const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - std::chrono::steady_clock::now());
        pollfd p{STDIN_FILENO, POLLIN, 0};
        // Short polls: a signal is seen within 100 ms.
        if (::poll(&p, 1, static_cast<int>(std::clamp<long long>(wait.count(), 0, 100))) > 0) {
            char c = 0;
            if (::read(STDIN_FILENO, &c, 1) != 1) return ok;  // the terminal went away
            if (c == 'q' || c == 'Q') return ok;
            if (c == 's') sort = (sort + 1) % kSorts, redraw = true;
            if (c == 'r') reverse = !reverse, redraw = true;
        }
    }
}

}  // namespace simba::cli
