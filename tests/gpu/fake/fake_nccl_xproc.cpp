// The fake NCCL's cross-process files (fake_nccl_xproc.hpp).
#include "fake_nccl_xproc.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace fake_xproc {

namespace {

constexpr char kMagic[8] = "fkxp1";

bool write_all(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    b += w;
    n -= size_t(w);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  auto* b = static_cast<unsigned char*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, b, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    b += r;
    n -= size_t(r);
  }
  return true;
}

}  // namespace

std::string shared_dir_from_env() {
  const char* v = std::getenv("FAKE_NCCL_SHARED_DIR");
  return v != nullptr ? v : "";
}

bool make_dir(const std::string& path, std::string* why) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return true;
  *why = "cannot make the folder " + path + ": " + std::strerror(errno);
  return false;
}

std::string hex(const void* p, size_t n) {
  static const char d[] = "0123456789abcdef";
  std::string s;
  for (size_t k = 0; k < n; ++k) {
    const unsigned char c = static_cast<const unsigned char*>(p)[k];
    s += d[c >> 4];
    s += d[c & 15];
  }
  return s;
}

bool create_exclusive(const std::string& path, const std::string& text, int* err, std::string* why) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    *err = errno;
    *why = "cannot create " + path + ": " + std::strerror(errno);
    return false;
  }
  const bool ok = write_all(fd, text.data(), text.size());
  ::close(fd);
  *err = ok ? 0 : EIO;
  if (!ok) *why = "cannot write " + path;
  return ok;
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

bool put(const std::string& path, Header h, const void* data, std::string* why) {
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = "cannot write " + tmp + ": " + std::strerror(errno);
    return false;
  }
  const bool ok = write_all(fd, &h, sizeof h) && (h.bytes == 0 || write_all(fd, data, h.bytes));
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    *why = "cannot write " + path + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

bool get(const std::string& path, Header* h, std::vector<unsigned char>* data, std::string* why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = read_all(fd, h, sizeof *h) && std::memcmp(h->magic, kMagic, sizeof kMagic) == 0;
  if (ok) {
    data->resize(h->bytes);
    ok = h->bytes == 0 || read_all(fd, data->data(), h->bytes);
  }
  ::close(fd);
  if (!ok) *why = "fake NCCL: " + path + " is not a whole contribution file";
  return true;
}

}  // namespace fake_xproc
