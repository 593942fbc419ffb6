// SPDX-License-Identifier: Apache-2.0
// A fixed translation unit that measures how fast this machine compiles: scripts/compile_budget.py compiles it beside
// the build's report and scales every budget in compile_budgets.txt by its time against the reference time recorded
// there. It uses the standard library only, so loom's own changes never change it, and it asks the compiler for the
// same kinds of work loom does: deep template instantiation, inlining and -O3 loop optimisation. Never edit it
// without measuring its reference time again.
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <ranges>
#include <regex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

namespace calibration {

template <class L, class R, class Op> struct binary {
  L l;
  R r;
  Op op;
  auto operator[](std::size_t i) const { return op(l[i], r[i]); }
};

template <class T> struct leaf {
  const T* p;
  T operator[](std::size_t i) const { return p[i]; }
};

template <class E, class T> void assign(T* out, const E& e, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<T>(e[i]);
}

template <class T, int Depth> auto chain(const T* a, const T* b) {
  if constexpr (Depth == 0) {
    return binary<leaf<T>, leaf<T>, std::plus<>>{{a}, {b}, {}};
  } else {
    auto inner = chain<T, Depth - 1>(a, b);
    using op = decltype([](auto x, auto y) { return x * y + std::tanh(x); });
    return binary<decltype(inner), leaf<T>, op>{inner, {b}, {}};
  }
}

template <class T, int Depth> void expressions(std::vector<T>& out, const std::vector<T>& a, const std::vector<T>& b) {
  assign(out.data(), chain<T, Depth>(a.data(), b.data()), out.size());
  if constexpr (Depth > 0) expressions<T, Depth - 1>(out, a, b);
}

template <class T> T containers(std::size_t n) {
  std::vector<T> v(n);
  std::iota(v.begin(), v.end(), T(1));
  std::ranges::sort(v, std::greater<>{});
  std::map<T, std::vector<T>> m;
  std::unordered_map<long, T> u;
  for (auto x : v | std::views::filter([](T y) { return static_cast<long>(y) % 3 != 0; }) |
                    std::views::transform([](T y) { return y * T(2); }))
    m[x].push_back(x), u[static_cast<long>(x)] += x;
  std::tuple<T, std::size_t, std::string> t{std::accumulate(v.begin(), v.end(), T(0)), m.size(), "sum"};
  return std::get<0>(t) + static_cast<T>(u.size());
}

using value = std::variant<int, long, float, double, std::string, std::vector<int>, std::map<std::string, double>>;

std::size_t visit_all(const std::vector<value>& values) {
  std::size_t n = 0;
  for (const auto& v : values)
    n += std::visit(
        [](const auto& x) -> std::size_t {
          using X = std::decay_t<decltype(x)>;
          if constexpr (std::is_arithmetic_v<X>) return static_cast<std::size_t>(x);
          else return x.size();
        },
        v);
  return n;
}

std::size_t matches(const std::string& text) {
  std::size_t n = 0;
  for (const char* pattern : {R"re((\w+)@(\w+)\.com)re", R"re(^\s*(\d+)\s*,\s*"([^"]*)"\s*$)re",
                              R"re([A-Z][a-z]+(?:\s+[A-Z][a-z]+)*)re"}) {
    std::regex re(pattern);
    const auto found = std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator());
    n += static_cast<std::size_t>(found);
    n += std::regex_match(text, re);
  }
  return n;
}

}  // namespace calibration

int main(int argc, char**) {
  std::vector<float> f(64, 1.0f), out(64);
  std::vector<double> d(64, 1.0), outd(64);
  calibration::expressions<float, 12>(out, f, f);
  calibration::expressions<double, 12>(outd, d, d);
  auto s = calibration::containers<int>(100) + calibration::containers<long>(100);
  auto r = calibration::containers<float>(100) + calibration::containers<double>(100);
  std::vector<calibration::value> values{1, 2L, 3.0f, 4.0, std::string("five"), std::vector<int>{6}};
  return static_cast<int>(out[0] + outd[0] + s + r) + static_cast<int>(calibration::visit_all(values)) +
         static_cast<int>(calibration::matches(std::string(static_cast<std::size_t>(argc), 'a')));
}
