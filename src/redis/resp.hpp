#pragma once
// RESP2 request encoding and reply parsing, kept apart from I/O so both are unit-tested without
// a server.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <limitcounter/reply.hpp>

namespace limitcounter::detail {

/// Appends `argv` to `out` as one RESP array of bulk strings:
/// `*<n>\r\n` then `$<len>\r\n<bytes>\r\n` per argument. Arguments may hold any bytes.
void append_resp_command(std::string& out, const std::vector<std::string_view>& argv);

/// Appends `<command> <script> <keys.size()> <keys...> <args...>` (EVALSHA and a SHA1, or FCALL
/// and a function's name) as `append_resp_command` would encode that argv, without building it.
void append_script_call(std::string& out, std::string_view command, std::string_view script,
                        const std::vector<std::string>& keys, const std::vector<std::string>& args);

/// Turns the bytes a server sends into `Reply` values, one reply at a time, in order. Bytes
/// may arrive in any pieces: a reply split over several reads is scanned where the last scan
/// stopped (never from its start again), and built once it is complete. Bytes after a reply
/// are kept for the next one (a pipeline's replies arrive together).
class RespReader {
public:
  /// What `next` found.
  enum class Status { reply, more, bad };

  /// Appends bytes received from the server.
  void feed(const char* data, std::size_t size) { buffer_.append(data, size); }

  /// The next complete reply into `out` (Status::reply); Status::more while its bytes have
  /// not all arrived; Status::bad if the bytes are not RESP2 (see `problem`: the reader is
  /// then unusable, as the connection it reads).
  Status next(Reply& out);

  /// Why the bytes are not RESP2, after Status::bad.
  const char* problem() const noexcept { return problem_; }

private:
  Status fail(const char* problem);
  Status took(std::size_t end); // the reply ended at `end`: the next begins there

  std::string buffer_;
  std::size_t start_ = 0;          // where the next reply begins in buffer_
  std::size_t scanned_ = 0;        // how far the reply in progress was checked
  std::vector<std::int64_t> open_; // elements still to come, per open array (outermost first)
  const char* problem_ = nullptr;
};

} // namespace limitcounter::detail
