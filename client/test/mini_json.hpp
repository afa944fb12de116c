// Tests: a small strict JSON parser (RFC 8259 minus \u surrogate pairs), to
// check that `simba ... --json` prints well-formed JSON.
#pragma once

#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace mini_json {

struct Value {
    enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
    bool b = false;
    double n = 0;
    std::string s;
    std::vector<Value> a;
    std::map<std::string, Value> o;
    const Value& operator[](const std::string& k) const {
        auto it = o.find(k);
        if (kind != Object || it == o.end()) throw std::runtime_error("no key " + k);
        return it->second;
    }
};

class Parser {
public:
    explicit Parser(const std::string& t) : t_(t) {}
    Value parse() {
        Value v = value();
        ws();
        if (i_ != t_.size()) fail("trailing characters");
        return v;
    }

private:
    [[noreturn]] void fail(const std::string& m) { throw std::runtime_error("JSON: " + m + " at " + std::to_string(i_)); }
    void ws() {
        while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\n' || t_[i_] == '\t' || t_[i_] == '\r')) ++i_;
    }
    bool lit(const char* w) {
        std::string s(w);
        if (t_.compare(i_, s.size(), s) == 0) {
            i_ += s.size();
            return true;
        }
        return false;
    }
    Value value() {
        ws();
        if (i_ >= t_.size()) fail("unexpected end");
        Value v;
        char c = t_[i_];
        if (c == '{') {
            v.kind = Value::Object;
            ++i_;
            ws();
            if (i_ < t_.size() && t_[i_] == '}') { ++i_; return v; }
            for (;;) {
                ws();
                if (i_ >= t_.size() || t_[i_] != '"') fail("key expected");
                std::string k = str();
                ws();
                if (i_ >= t_.size() || t_[i_++] != ':') fail(": expected");
                if (v.o.count(k)) fail("duplicate key " + k);
                v.o[k] = value();
                ws();
                if (i_ < t_.size() && t_[i_] == ',') { ++i_; continue; }
                if (i_ < t_.size() && t_[i_] == '}') { ++i_; return v; }
                fail(", or } expected");
            }
        }
        if (c == '[') {
            v.kind = Value::Array;
            ++i_;
            ws();
            if (i_ < t_.size() && t_[i_] == ']') { ++i_; return v; }
            for (;;) {
                v.a.push_back(value());
                ws();
                if (i_ < t_.size() && t_[i_] == ',') { ++i_; continue; }
                if (i_ < t_.size() && t_[i_] == ']') { ++i_; return v; }
                fail(", or ] expected");
            }
        }
        if (c == '"') {
            v.kind = Value::String;
            v.s = str();
            return v;
        }
        if (lit("true")) { v.kind = Value::Bool; v.b = true; return v; }
        if (lit("false")) { v.kind = Value::Bool; return v; }
        if (lit("null")) return v;
        std::size_t st = i_;
        if (t_[i_] == '-') ++i_;
        if (i_ >= t_.size() || !isdigit(static_cast<unsigned char>(t_[i_]))) fail("value expected");
        if (t_[i_] == '0' && i_ + 1 < t_.size() && isdigit(static_cast<unsigned char>(t_[i_ + 1]))) fail("leading zero");
        while (i_ < t_.size() && (isdigit(static_cast<unsigned char>(t_[i_])) || t_[i_] == '.' || t_[i_] == 'e' ||
                                  t_[i_] == 'E' || t_[i_] == '+' || t_[i_] == '-'))
            ++i_;
        std::string num = t_.substr(st, i_ - st);
        char* end = nullptr;
        v.kind = Value::Number;
        v.n = std::strtod(num.c_str(), &end);
        if (!end || *end) fail("bad number " + num);
        return v;
    }
    std::string str() {
        ++i_;  // opening quote
        std::string out;
        while (i_ < t_.size()) {
            unsigned char c = static_cast<unsigned char>(t_[i_++]);
            if (c == '"') return out;
            if (c < 0x20) fail("control character in string");
            if (c != '\\') { out += static_cast<char>(c); continue; }
            if (i_ >= t_.size()) break;
            char e = t_[i_++];
            switch (e) {
                case '"': out += '"'; break;
                case '\\': out += '\\'; break;
                case '/': out += '/'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'u': {
                    if (i_ + 4 > t_.size()) fail("short \\u");
                    unsigned cp = static_cast<unsigned>(std::stoul(t_.substr(i_, 4), nullptr, 16));
                    i_ += 4;
                    if (cp < 0x80) out += static_cast<char>(cp);
                    else if (cp < 0x800) { out += static_cast<char>(0xC0 | (cp >> 6)); out += static_cast<char>(0x80 | (cp & 0x3F)); }
                    else { out += static_cast<char>(0xE0 | (cp >> 12)); out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)); out += static_cast<char>(0x80 | (cp & 0x3F)); }
                    break;
                }
                default: fail("bad escape");
            }
        }
        fail("unterminated string");
    }
    const std::string& t_;
    std::size_t i_ = 0;
};

inline Value parse(const std::string& text) { return Parser(text).parse(); }

}  // namespace mini_json
