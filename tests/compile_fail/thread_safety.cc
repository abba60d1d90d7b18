// Proof that the clang build checks locking (-Wthread-safety -Werror): built
// twice by CMakeLists.txt at configure time. With SHMK_CORRECT it must
// compile (the positive control: the check is not failing for some other
// reason); without it, it reads a SHMK_GUARDED_BY member without the lock and
// calls a SHMK_REQUIRES function unlocked, and must NOT compile.
#include "base/mutex.h"

namespace shmkeeper {

class Counter {
 public:
  int Get() SHMK_EXCLUDES(mu_) {
#ifdef SHMK_CORRECT
    MutexLock l(&mu_);
    return BumpLocked();
#else
    int n = n_;               // error: reading variable 'n_' requires holding mutex 'mu_'
    return n + BumpLocked();  // error: calling function 'BumpLocked' requires holding mutex 'mu_'
#endif
  }

 private:
  int BumpLocked() SHMK_REQUIRES(mu_) { return ++n_; }
  Mutex mu_;
  int n_ SHMK_GUARDED_BY(mu_) = 0;
};

}  // namespace shmkeeper

int main() {
  shmkeeper::Counter c;
  return c.Get() == 1 ? 0 : 1;
}
