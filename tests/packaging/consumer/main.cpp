// A program outside the project: links limitcounter::limitcounter and checks one fact.
#include <chrono>
#include <iostream>

#include <limitcounter/limitcounter.hpp>

int main() {
  // 2021-11-11T16:30:00Z is 2021-11-12 00:30 in Shanghai (UTC+8).
  const limitcounter::TimePoint at{std::chrono::seconds{1636648200}};
  const auto id = limitcounter::Calendar("Asia/Shanghai").window(limitcounter::Period::day, at).id;
  std::cout << "Asia/Shanghai day of 2021-11-11T16:30Z: " << id << '\n';
  return id == "20211112" ? 0 : 1;
}
