// gptq-quantize's resume journal; see gptq_journal.h.
#include "libconvert/gptq_journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "formats/atomic_output.h"
#include "formats/file_check.h"

#include "core/version.h"

namespace tl {
namespace {

constexpr const char* kJournalFile = "journal.json";
constexpr const char* kKind = "gptq-quantize resume journal";

// The first key where two fingerprints differ ("" when equal), with both values.
std::string first_difference(const nlohmann::json& was, const nlohmann::json& now, std::string* a, std::string* b) {
  for (const auto& [k, v] : now.items())
    if (!was.contains(k) || was[k] != v) {
      *a = was.contains(k) ? was[k].dump() : "(absent)";
      *b = v.dump();
      return k;
    }
  for (const auto& [k, v] : was.items())
    if (!now.contains(k)) {
      *a = v.dump();
      *b = "(absent)";
      return k;
    }
  return "";
}

// A name this tool gives an entry of the folder (journal.json, the stage files, their temporaries).
bool ours(const std::string& n) {
  return n == kJournalFile || n.rfind(".journal.json.tmp-", 0) == 0 || n.rfind("stage-", 0) == 0 ||
         n.rfind(".stage-", 0) == 0;
}

// True for a folder this tool made whose journal names no completed stage, or that has no
// journal.json (never written: a first write cut short; or deleted: a clearing cut short): no
// stage can be resumed from it, so removing it loses nothing. Anything not ours: false.
bool holds_no_stage(const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!is_directory(folder)) return false;
  for (const auto& e : fs::directory_iterator(folder, ec))
    if (!ours(e.path().filename().string())) return false;
  if (ec) return false;
  std::ifstream in(folder + "/" + kJournalFile);
  if (!in) return true;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("kind", std::string()) != kKind) return false;
  return j.contains("stages") && j["stages"].is_array() && j["stages"].empty();
}

// Everything in the folder, journal.json last, so that a kill in between leaves a folder
// holds_no_stage() accepts (given a journal.json naming no stage, or none); the first error.
std::error_code remove_entries(const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code ec, first;
  std::vector<fs::path> rest;
  for (const auto& e : fs::directory_iterator(folder, ec))
    if (e.path().filename() != kJournalFile) rest.push_back(e.path());
  if (ec) first = ec;
  for (const fs::path& p : rest)
    if (fs::remove_all(p, ec) == static_cast<std::uintmax_t>(-1) && !first) first = ec;
  if (!fs::remove(folder + "/" + kJournalFile, ec) && ec && !first) first = ec;
  return first;
}

}  // namespace

GptqJournal::GptqJournal(const std::string& output, const nlohmann::json& fingerprint, bool resume)
    : folder_(folder_for(output)), fingerprint_(fingerprint) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool exists = fs::exists(fs::symlink_status(folder_, ec));
  if (exists && !is_directory(folder_)) throw Error("exists and is not a resume journal folder", folder_);
  if (!exists && !fs::create_directory(folder_, ec)) {
    if (ec != std::errc::file_exists) throw Error("cannot create the resume journal: " + ec.message(), folder_);
  }
  lock();  // from here on this process owns the folder
  try {
    open_locked(exists, resume);
  } catch (...) {  // refused: the lock goes (the folder and what it holds stay as they were)
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw;
  }
}

void GptqJournal::open_locked(bool exists, bool resume) {
  const std::string path = folder_ + "/" + kJournalFile;
  if (!exists) {
    write_journal();
    return;
  }
  if (holds_no_stage(folder_)) {
    // Ours, with no completed stage: nothing to lose or to resume; start it afresh.
    if (const std::error_code err = remove_entries(folder_))
      throw Error("cannot clear the resume journal: " + err.message(), folder_);
    write_journal();
    return;
  }
  if (!resume)
    throw Error("the journal of an interrupted run of this output: rerun the same command with --resume to continue "
                "it, or remove the folder to start again",
                folder_);
  std::ifstream in(path);
  if (!in) throw Error("not a gptq-quantize resume journal (no journal.json)", folder_);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("kind", std::string()) != kKind || !j.contains("fingerprint") ||
      !j.contains("stages") || !j["stages"].is_array())
    throw Error("not a gptq-quantize resume journal", path);
  std::string was, now;
  const std::string key = first_difference(j["fingerprint"], fingerprint_, &was, &now);
  if (!key.empty())
    throw Error("--resume: " + key + " differs from the interrupted run's (journal: " + was + ", now: " + now +
                    "); rerun with the same arguments and inputs, or remove the journal to start again",
                path);
  try {
    for (const nlohmann::json& s : j["stages"]) {
      Stage st;
      st.name = s.at("stage").get<std::string>();
      st.file = s.at("file").get<std::string>();
      st.weights = s.at("weights").get<std::vector<std::string>>();
      if (st.file.find('/') != std::string::npos || !is_regular_file(folder_ + "/" + st.file))
        throw Error("stage '" + st.name + "': missing file '" + st.file + "'", path);
      stages_.push_back(std::move(st));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("not a gptq-quantize resume journal: ") + e.what(), path);
  }
}

GptqJournal::~GptqJournal() {
  if (lock_fd_ < 0) return;
  // A run that ends (an error: the output is not written) before its first stage completed
  // leaves nothing to resume: no folder either. One with completed stages keeps them.
  std::error_code ec;
  if (stages_.empty()) std::filesystem::remove_all(folder_, ec);  // still locked: ours alone
  ::close(lock_fd_);
}

// flock(2) on the folder itself, held until the process ends (a kill -9 releases it): a second
// run of the same command while the first still runs is refused instead of sharing the journal.
void GptqJournal::lock() {
  lock_fd_ = ::open(folder_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lock_fd_ < 0) throw Error(std::string("cannot open the resume journal: ") + std::strerror(errno), folder_);
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (err == EWOULDBLOCK)
      throw Error("another gptq-quantize run of this output is running (it holds the resume journal); wait for it, "
                  "or write to another output",
                  folder_);
    throw Error(std::string("cannot lock the resume journal: ") + std::strerror(err), folder_);
  }
}

bool GptqJournal::stage_done(const std::string& stage) const {
  for (const Stage& s : stages_)
    if (s.name == stage) return true;
  return false;
}

std::vector<std::string> GptqJournal::done_stages() const {
  std::vector<std::string> out;
  for (const Stage& s : stages_) out.push_back(s.name);
  return out;
}

std::vector<QuantWeight> GptqJournal::read_stage(const std::string& stage) const {
  for (const Stage& s : stages_) {
    if (s.name != stage) continue;
    const TinyloopReader r(folder_ + "/" + s.file);
    std::vector<QuantWeight> out;
    for (const std::string& w : s.weights) {
      if (!r.has_quant(w)) throw Error("the journal's stage '" + stage + "' lacks weight '" + w + "'", folder_ + "/" + s.file);
      out.push_back(r.read_quant(w, /*with_marlin=*/false));
    }
    return out;
  }
  throw Error("internal: stage '" + stage + "' is not in the journal", folder_);
}

void GptqJournal::record_stage(const std::string& stage, const std::vector<const QuantWeight*>& weights) {
  Stage st;
  st.name = stage;
  st.file = "stage-" + std::to_string(stages_.size()) + ".tinyloop";
  {
    TinyloopWriter w(folder_ + "/" + st.file, std::string("gptq-quantize ") + kVersion + " (resume journal)");
    for (const QuantWeight* q : weights) {
      w.write_quant(*q);
      st.weights.push_back(q->name);
    }
    w.commit();
  }
  stages_.push_back(std::move(st));
  write_journal();
}

void GptqJournal::write_journal() const {
  nlohmann::json j = {{"kind", kKind}, {"fingerprint", fingerprint_}, {"stages", nlohmann::json::array()}};
  for (const Stage& s : stages_) j["stages"].push_back({{"stage", s.name}, {"file", s.file}, {"weights", s.weights}});
  AtomicOutput out(folder_ + "/" + kJournalFile, OutputSink::kStream);
  out.write_text([&](std::ostream& os) { os << j.dump(1) << "\n"; });
}

// Still locked: no other run is inside. A kill can land anywhere in here, so the folder passes
// only through states a later run reads right: first journal.json names no stage (one atomic
// rename), then remove_entries (journal.json last), the empty folder at the end -- never a
// journal naming a stage file already deleted, which --resume would refuse. The output is whole
// by now: a journal.json that cannot be rewritten (a full disk) does not stop the removal.
void GptqJournal::remove() {
  stages_.clear();
  try {
    write_journal();
  } catch (const std::exception&) {
  }
  std::error_code first = remove_entries(folder_), ec;
  if (!std::filesystem::remove(folder_, ec) && ec && !first) first = ec;
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = -1;
  if (first) throw Error("cannot remove the resume journal: " + first.message(), folder_);
}

}  // namespace tl
