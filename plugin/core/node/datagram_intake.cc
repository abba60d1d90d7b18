#include "node/datagram_intake.h"

namespace shmkeeper {

DatagramIntake::DatagramIntake(std::shared_ptr<CreatorBook> creators, std::function<void()> poke, Reporter::Log log,
                               Clock* clock)
    : creators_(std::move(creators)), poke_(std::move(poke)), log_(std::move(log)), clock_(clock) {}

void DatagramIntake::OnDatagram(pid_t sender, uid_t uid, const std::string& payload) {
  Json doc = Json::parse(payload, nullptr, /*allow_exceptions=*/false);
  std::string type = StringField(doc, "type");
  if (type == "create") {
    ClaimRejection why = ClaimRejection::kMalformed;
    Result<VerifiedClaim> claim = VerifyCreatorClaim(doc, SenderCreds{sender, uid}, &why, "/proc", clock_);
    if (!claim.ok()) return Reject(why, sender, claim.status().message());
    Status recorded = creators_->Record(claim->key, std::move(claim->record));
    if (!recorded.ok()) Reject(ClaimRejection::kLiveCreator, sender, recorded.message());
    return;
  }
  if (type == "unlink" || type == "memfd") return;  // older preloads' notices: the observer or inotify sees these
  if (type == "stopped") {
    poke_();  // the hook's poststop: a container is gone
    return;
  }
  Reject(ClaimRejection::kMalformed, sender, "unknown datagram");
}

void DatagramIntake::Reject(ClaimRejection why, pid_t sender, const std::string& detail) {
  constexpr auto kWindow = std::chrono::minutes(1);
  std::string line;
  {
    MutexLock l(&mu_);
    rejected_[ClaimRejectionName(why)]++;
    auto now = clock_->Now();
    if (now - window_ >= kWindow) {
      if (dropped_) line = std::to_string(dropped_) + " more refused datagrams were not logged; ";
      window_ = now;
      logged_ = 0;
      dropped_ = 0;
    }
    if (logged_ >= kLinesPerWindow) {
      dropped_++;
      return;
    }
    logged_++;
  }
  log_(LogLevel::kWarn, line + "refused a datagram from pid " + std::to_string(sender) + " (" +
                            ClaimRejectionName(why) + "): " + detail);
}

std::map<std::string, int64_t> DatagramIntake::rejected() const {
  MutexLock l(&mu_);
  return rejected_;
}

}  // namespace shmkeeper
