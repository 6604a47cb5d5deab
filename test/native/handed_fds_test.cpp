// Tests of the list of descriptors handed over to Lisp.
#include "core/handed_fds.h"

#include "catch_compat.h"

using fastrevert::HandedFds;

TEST_CASE("a descriptor handed over is accepted until given back and never again", "[handed-fds]") {
  HandedFds handed;
  CHECK_FALSE(handed.contains(0));
  handed.add(12);
  CHECK(handed.contains(12));
  CHECK_FALSE(handed.contains(13));
  CHECK(handed.remove(12));
  // A second close of the same number is refused: the system may have
  // given the number to something else meanwhile.
  CHECK_FALSE(handed.remove(12));
  CHECK_FALSE(handed.contains(12));
}
