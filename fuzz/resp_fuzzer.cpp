// RESP2 reply parsing: any bytes, fed in any pieces, give the replies (and the verdict on what
// follows them) that the same bytes give fed at once; nothing crashes, nothing throws.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "redis/resp.hpp"

namespace {

using limitcounter::Reply;
using limitcounter::detail::RespReader;

struct Outcome {
  std::vector<std::string> replies;
  RespReader::Status last = RespReader::Status::more;
  std::string problem;
};

Outcome parse(const char* data, std::size_t size, std::size_t piece) {
  RespReader reader;
  Outcome outcome;
  for (std::size_t at = 0; at < size && outcome.last != RespReader::Status::bad; at += piece) {
    reader.feed(data + at, std::min(piece, size - at));
    Reply reply;
    while ((outcome.last = reader.next(reply)) == RespReader::Status::reply) {
      outcome.replies.push_back(reply.debug_string());
    }
  }
  if (outcome.last == RespReader::Status::bad) {
    outcome.problem = reader.problem();
  }
  return outcome;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  const std::size_t piece = data[0] % 16 + 1;
  const char* bytes = reinterpret_cast<const char*>(data + 1);
  const Outcome whole = parse(bytes, size - 1, size);
  const Outcome pieces = parse(bytes, size - 1, piece);
  if (whole.replies != pieces.replies || whole.last != pieces.last ||
      whole.problem != pieces.problem) {
    std::abort();
  }
  return 0;
}
