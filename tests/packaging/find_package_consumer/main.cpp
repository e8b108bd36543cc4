// A program outside the project, built against limitcounter (installed, or added as a
// subdirectory): it includes the umbrella header, links limitcounter::limitcounter and
// checks one zone-aware fact.
#include <chrono>
#include <iostream>

#include <limitcounter/limitcounter.hpp>

int main() {
  // 1636648200 s after the epoch is 2021-11-11T16:30:00Z, which is 2021-11-12 00:30 in
  // Shanghai (UTC+8): the Shanghai day is already the 12th.
  const std::chrono::system_clock::time_point at{std::chrono::seconds{1636648200}};
  const auto window = limitcounter::Calendar("Asia/Shanghai").window(limitcounter::Period::day, at);
  std::cout << "Asia/Shanghai day window of 2021-11-11T16:30:00Z: " << window.id << '\n';
  if (window.id != "20211112") {
    std::cerr << "expected 20211112\n";
    return 1;
  }
  return 0;
}
