// White-box tests of the handle tables (capi/src/handles.hpp): a handle's type is part of its
// value, and a slot whose generation would wrap around is retired, so a released handle can
// never become valid again. The C API reaches the wrap only after 2^31 create/release cycles
// of one slot; here the table's last generation is lowered to get there at once.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "../../capi/src/handles.hpp"

using flowlane::capi::HandleTable;
using flowlane::capi::HandleType;

TEST(HandleTable, ReleasedHandlesNeverComeBackWhenTheGenerationWouldWrap) {
  HandleTable<int, HandleType::kObject> table(7);  // generations 1, 3, 5, 7, then retired
  int x = 0;
  std::vector<uint64_t> released;
  std::set<uint32_t> indices;
  for (int k = 0; k < 64; ++k) {
    uint64_t h = table.insert(&x);
    ASSERT_NE(h, 0u);
    for (uint64_t old : released) ASSERT_NE(h, old) << "a released handle value was handed out again";
    indices.insert(uint32_t(h) & flowlane::capi::kIndexMask);
    ASSERT_EQ(table.erase(h), &x);
    released.push_back(h);
  }
  for (uint64_t old : released) EXPECT_EQ(table.lookup(old), nullptr);
  EXPECT_GE(indices.size(), 64u / 4) << "a retired slot was reused";
}

TEST(HandleTable, AHandleOfAnotherTypeWithTheSameSlotIsNotFound) {
  HandleTable<int, HandleType::kObject> objects;
  HandleTable<int, HandleType::kEngine> engines;
  int a = 0, b = 0;
  uint64_t o = objects.insert(&a);
  uint64_t e = engines.insert(&b);
  EXPECT_EQ(uint32_t(o) & flowlane::capi::kIndexMask, uint32_t(e) & flowlane::capi::kIndexMask);  // same slot
  EXPECT_NE(o, e);
  EXPECT_EQ(objects.lookup(e), nullptr);
  EXPECT_EQ(engines.lookup(o), nullptr);
  EXPECT_EQ(objects.erase(e), nullptr);
  EXPECT_EQ(objects.lookup(o), &a);
}
