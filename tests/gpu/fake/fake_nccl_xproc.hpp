// The fake NCCL's cross-process mode, its file side (fake_nccl_xproc.cpp): where a clique
// whose ranks live in several processes keeps its files, and how they are written and
// read. The matching, the waits and the data movement are fake_nccl.cpp's.
//
// A unique id made while FAKE_NCCL_SHARED_DIR names a folder carries that folder, like a
// real id carries its root's address; every rank initialised from it, in any process,
// meets the others through <folder>/fake-nccl-<id>/:
//   join.<rank>            the rank joined (created exclusively: a rank joins once)
//   c<k>.r<rank>           the rank's contribution to its k-th collective (header + data)
//   s<from>.<to>.<k>       the k-th send from `from` to `to` (header + data)
//   r<from>.<to>.<k>       the k-th recv on `to` from `from` (header: the sender waits for it)
//   abort.<rank>           the rank aborted its communicator
// Contributions are written aside and renamed, so a reader sees a whole file or none.
// Nothing is removed: a test gives each run a fresh folder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fake_xproc {

// The start of every contribution file: the operation's signature and the data's size.
struct Header {
  char magic[8];
  int32_t kind, dt, redop, root, rank, pad;
  uint64_t count, seq, bytes;
};

// The folder new unique ids carry: FAKE_NCCL_SHARED_DIR, or "" (ranks meet only inside
// this process, the fake's default).
std::string shared_dir_from_env();

// Makes `path` a folder if it is not one; false with *why.
bool make_dir(const std::string& path, std::string* why);

// Lower-case hex of n bytes.
std::string hex(const void* p, size_t n);

// Creates `path` exclusively with `text` in it; false with *why (EEXIST: someone did first).
bool create_exclusive(const std::string& path, const std::string& text, int* err, std::string* why);

bool exists(const std::string& path);

// Writes header h and `bytes` bytes of data to `path`, aside first then renamed; false with *why.
bool put(const std::string& path, Header h, const void* data, std::string* why);

// Reads a whole contribution of `path`: false if it is not there (yet). A file that is not
// one of these sets *why and returns true.
bool get(const std::string& path, Header* h, std::vector<unsigned char>* data, std::string* why);

}  // namespace fake_xproc
