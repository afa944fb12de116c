// Tests: a checker of the Prometheus text exposition format (0.0.4), in the
// spirit of `promtool check metrics`: every sample belongs to a family
// declared by one # TYPE (and at most one # HELP) before its samples; a
// family's samples are contiguous; names and label names are valid; label
// values are quoted with only \\ \" \n escapes; values parse; no series
// repeats; counters end in _total; histograms have cumulative _bucket series
// with increasing `le`, a +Inf bucket equal to _count, and a _sum.
#pragma once

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace prom_check {

struct Sample {
    std::string name;
    std::map<std::string, std::string> labels;
    double value = 0;
};

struct Result {
    std::vector<Sample> samples;
    std::map<std::string, std::string> types;  // family -> type
    std::vector<std::string> errors;
    bool ok() const { return errors.empty(); }
    std::string error_text() const {
        std::string s;
        for (auto& e : errors) s += e + "\n";
        return s;
    }
    /// Value of the sample `name` whose labels include `want`; NaN if none.
    double value(const std::string& name, const std::map<std::string, std::string>& want = {}) const {
        for (auto& s : samples) {
            if (s.name != name) continue;
            bool match = true;
            for (auto& [k, v] : want) {
                auto it = s.labels.find(k);
                if (it == s.labels.end() || it->second != v) match = false;
            }
            if (match) return s.value;
        }
        return std::nan("");
    }
};

inline bool name_ok(const std::string& n, bool label) {
    if (n.empty()) return false;
    for (std::size_t i = 0; i < n.size(); ++i) {
        char c = n[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!label && c == ':') ||
                  (i > 0 && c >= '0' && c <= '9');
        if (!ok) return false;
    }
    return true;
}

inline bool parse_value(const std::string& s, double& v) {
    if (s == "+Inf" || s == "Inf") { v = INFINITY; return true; }
    if (s == "-Inf") { v = -INFINITY; return true; }
    if (s == "NaN") { v = NAN; return true; }
    if (s.empty()) return false;
    char* end = nullptr;
    v = std::strtod(s.c_str(), &end);
    return end && *end == '\0';
}

/// The family a sample name belongs to, given the declared types.
inline std::string family_of(const std::string& name, const std::map<std::string, std::string>& types) {
    if (types.count(name)) return name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        std::string s = suffix;
        if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
            std::string base = name.substr(0, name.size() - s.size());
            auto it = types.find(base);
            if (it != types.end() && (it->second == "histogram" || it->second == "summary")) return base;
        }
    }
    return {};
}

inline Result check(const std::string& text) {
    Result r;
    std::istringstream in(text);
    std::string line;
    int n = 0;
    std::set<std::string> helps, finished;
    std::string current;  // family whose samples are being read
    std::set<std::string> series;
    auto err = [&](const std::string& m) { r.errors.push_back("line " + std::to_string(n) + ": " + m + ": " + line); };
    if (!text.empty() && text.back() != '\n') r.errors.push_back("output does not end with a newline");
    while (std::getline(in, line)) {
        ++n;
        if (line.empty()) continue;
        if (line[0] == '#') {
            std::istringstream ls(line);
            std::string hash, kw, name, rest;
            ls >> hash >> kw >> name;
            if (hash != "#" || (kw != "HELP" && kw != "TYPE")) continue;  // a plain comment
            if (!name_ok(name, false)) { err("invalid metric name in " + kw); continue; }
            if (kw == "HELP") {
                if (!helps.insert(name).second) err("second HELP for " + name);
            } else {
                ls >> rest;
                std::string extra;
                ls >> extra;
                if (rest != "counter" && rest != "gauge" && rest != "histogram" && rest != "summary" && rest != "untyped")
                    err("unknown type");
                if (!extra.empty()) err("junk after TYPE");
                if (r.types.count(name)) err("second TYPE for " + name);
                bool has_samples = false;
                for (auto& s : r.samples) has_samples |= family_of(s.name, {{name, rest}}) == name;
                if (has_samples) err("TYPE after samples of " + name);
                r.types[name] = rest;
                if (rest == "counter" && (name.size() < 6 || name.compare(name.size() - 6, 6, "_total") != 0))
                    err("counter name should end in _total");
            }
            continue;
        }
        // name{labels} value [timestamp]
        std::size_t i = 0;
        while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
        Sample s;
        s.name = line.substr(0, i);
        if (!name_ok(s.name, false)) { err("invalid metric name"); continue; }
        if (i < line.size() && line[i] == '{') {
            ++i;
            bool bad = false;
            while (i < line.size() && line[i] != '}') {
                std::size_t st = i;
                while (i < line.size() && line[i] != '=') ++i;
                std::string ln = line.substr(st, i - st);
                if (!name_ok(ln, true) || i + 1 >= line.size() || line[i + 1] != '"') { bad = true; break; }
                i += 2;
                std::string v;
                bool closed = false;
                while (i < line.size()) {
                    char c = line[i++];
                    if (c == '"') { closed = true; break; }
                    if (c == '\\') {
                        if (i >= line.size()) break;
                        char e = line[i++];
                        if (e == '\\') v += '\\';
                        else if (e == '"') v += '"';
                        else if (e == 'n') v += '\n';
                        else { bad = true; break; }
                    } else {
                        v += c;
                    }
                }
                if (!closed || bad) { bad = true; break; }
                if (s.labels.count(ln)) { bad = true; break; }
                s.labels[ln] = v;
                if (i < line.size() && line[i] == ',') ++i;
            }
            if (bad || i >= line.size() || line[i] != '}') { err("malformed labels"); continue; }
            ++i;
        }
        if (i >= line.size() || line[i] != ' ') { err("no value"); continue; }
        std::istringstream vs(line.substr(i + 1));
        std::string value, ts, junk;
        vs >> value >> ts >> junk;
        if (!parse_value(value, s.value)) { err("bad value"); continue; }
        if (!ts.empty()) {
            char* end = nullptr;
            std::strtoll(ts.c_str(), &end, 10);
            if (!end || *end) err("bad timestamp");
        }
        if (!junk.empty()) err("junk after the value");
        std::string fam = family_of(s.name, r.types);
        if (fam.empty()) { err("sample without a TYPE line"); continue; }
        if (fam != current) {
            if (finished.count(fam)) err("samples of " + fam + " are not contiguous");
            if (!current.empty()) finished.insert(current);
            current = fam;
        }
        std::string key = s.name;
        for (auto& [k, v] : s.labels) key += "\x1f" + k + "=" + v;
        if (!series.insert(key).second) err("duplicate series");
        const std::string& type = r.types[fam];
        if (type == "histogram" && s.name == fam) err("histogram sample without _bucket/_sum/_count");
        if (type == "histogram" && s.name == fam + "_bucket" && !s.labels.count("le")) err("bucket without le");
        if (type == "counter" && !(s.value >= 0)) err("negative counter");
        r.samples.push_back(std::move(s));
    }
    // Histograms: per label set (without le), buckets cumulative, +Inf == _count, _sum present.
    for (auto& [fam, type] : r.types) {
        if (type != "histogram") continue;
        std::map<std::string, std::vector<std::pair<double, double>>> buckets;
        std::map<std::string, double> counts, sums;
        for (auto& s : r.samples) {
            auto labels = s.labels;
            double le = 0;
            if (s.name == fam + "_bucket") {
                if (!parse_value(labels["le"], le)) { r.errors.push_back(fam + ": bad le"); continue; }
                labels.erase("le");
            }
            std::string key;
            for (auto& [k, v] : labels) key += k + "=" + v + ",";
            if (s.name == fam + "_bucket") buckets[key].push_back({le, s.value});
            else if (s.name == fam + "_count") counts[key] = s.value;
            else if (s.name == fam + "_sum") sums[key] = s.value;
        }
        for (auto& [key, bs] : buckets) {
            for (std::size_t i = 1; i < bs.size(); ++i) {
                if (!(bs[i].first > bs[i - 1].first)) r.errors.push_back(fam + "{" + key + "}: le not increasing");
                if (bs[i].second < bs[i - 1].second) r.errors.push_back(fam + "{" + key + "}: buckets not cumulative");
            }
            if (bs.empty() || !std::isinf(bs.back().first)) r.errors.push_back(fam + "{" + key + "}: no +Inf bucket");
            else if (!counts.count(key) || counts[key] != bs.back().second)
                r.errors.push_back(fam + "{" + key + "}: _count differs from the +Inf bucket");
            if (!sums.count(key)) r.errors.push_back(fam + "{" + key + "}: no _sum");
        }
    }
    return r;
}

}  // namespace prom_check
