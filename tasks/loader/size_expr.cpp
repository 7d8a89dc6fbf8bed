// Size expressions: a tiny checked-integer calculator over workload sizes ("12*n", "(n+3)/4").
#include <algorithm>
#include <cctype>
#include <set>

#include "tasks/loader/task.hpp"

namespace d2k::tasks {
namespace {

// Recursive descent over: expr := term (('+'|'-') term)*; term := unary (('*'|'/'|'%') unary)*;
// unary := '-' unary | primary; primary := INT | IDENT | '(' expr ')'.
class Parser {
 public:
  Parser(std::string_view text, const std::map<std::string, std::int64_t>* vars,
         std::set<std::string>* symbols)
      : text_(text), vars_(vars), symbols_(symbols) {}

  std::int64_t parse() {
    if (text_.size() > kMaxExprLength) {
      fail("longer than " + std::to_string(kMaxExprLength) + " characters");
    }
    skip_space();
    if (pos_ == text_.size()) fail("empty expression");
    const std::int64_t v = expr(0);
    skip_space();
    if (pos_ != text_.size()) fail(std::string("unexpected '") + text_[pos_] + "'");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw std::invalid_argument("size expression \"" + std::string(text_) + "\": " + why + " (at offset " +
                                std::to_string(pos_) + ")");
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }
  bool accept(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  // Collecting symbols only: no values, so no arithmetic (and no arithmetic errors).
  bool symbolic() const { return vars_ == nullptr; }
  void enter(int depth) const {
    if (depth > kMaxExprDepth) fail("nested deeper than " + std::to_string(kMaxExprDepth));
  }

  std::int64_t expr(int depth) {
    enter(depth);
    std::int64_t v = term(depth);
    for (;;) {
      if (accept('+')) {
        const std::int64_t r = term(depth);
        if (symbolic()) continue;
        if (__builtin_add_overflow(v, r, &v)) fail("overflow in '+'");
      } else if (accept('-')) {
        const std::int64_t r = term(depth);
        if (symbolic()) continue;
        if (__builtin_sub_overflow(v, r, &v)) fail("overflow in '-'");
      } else {
        return v;
      }
    }
  }

  std::int64_t term(int depth) {
    std::int64_t v = unary(depth);
    for (;;) {
      if (accept('*')) {
        const std::int64_t r = unary(depth);
        if (symbolic()) continue;
        if (__builtin_mul_overflow(v, r, &v)) fail("overflow in '*'");
      } else if (accept('/')) {
        const std::int64_t r = unary(depth);
        if (symbolic()) continue;
        if (r == 0) fail("division by zero");
        if (v == INT64_MIN && r == -1) fail("overflow in '/'");
        v /= r;
      } else if (accept('%')) {
        const std::int64_t r = unary(depth);
        if (symbolic()) continue;
        if (r == 0) fail("modulo by zero");
        v = (r == -1) ? 0 : v % r;
      } else {
        return v;
      }
    }
  }

  std::int64_t unary(int depth) {
    if (accept('-')) {
      enter(depth + 1);
      const std::int64_t v = unary(depth + 1);
      if (symbolic()) return 0;
      if (v == INT64_MIN) fail("overflow in unary '-'");
      return -v;
    }
    return primary(depth);
  }

  std::int64_t primary(int depth) {
    skip_space();
    if (pos_ == text_.size()) fail("unexpected end");
    const char c = text_[pos_];
    if (c == '(') {
      ++pos_;
      const std::int64_t v = expr(depth + 1);
      if (!accept(')')) fail("missing ')'");
      return v;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      std::int64_t v = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, text_[pos_] - '0', &v)) {
          fail("integer literal overflows int64");
        }
        ++pos_;
      }
      if (pos_ < text_.size() &&
          (std::isalpha(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
        fail("bad number");
      }
      return v;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const std::size_t start = pos_;
      while (pos_ < text_.size() &&
             (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
        ++pos_;
      }
      std::string name(text_.substr(start, pos_ - start));
      if (symbols_ != nullptr) symbols_->insert(name);
      if (symbolic()) return 0;
      const auto it = vars_->find(name);
      if (it == vars_->end()) fail("unknown identifier '" + name + "'");
      return it->second;
    }
    fail(std::string("unexpected '") + c + "'");
  }

  std::string_view text_;
  const std::map<std::string, std::int64_t>* vars_;
  std::set<std::string>* symbols_;
  std::size_t pos_ = 0;
};

}  // namespace

std::int64_t eval_size_expr(std::string_view expr, const std::map<std::string, std::int64_t>& vars) {
  return Parser(expr, &vars, nullptr).parse();
}

std::vector<std::string> size_expr_symbols(std::string_view expr) {
  std::set<std::string> symbols;
  Parser(expr, nullptr, &symbols).parse();
  return {symbols.begin(), symbols.end()};
}

}  // namespace d2k::tasks
