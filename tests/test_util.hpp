// Shared helpers for the test suites.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "flowlane/flowlane.h"

#ifndef FL_UNDER_TSAN
#define FL_UNDER_TSAN 0
#endif
#ifndef FL_UNDER_ASAN
#define FL_UNDER_ASAN 0
#endif
#ifndef FL_UNDER_SANITIZER
#define FL_UNDER_SANITIZER 0
#endif

// Picks the normal size, or a smaller one under sanitizers.
constexpr long fl_scaled(long normal, long sanitized) { return FL_UNDER_SANITIZER ? sanitized : normal; }

// EXPECT that a call returned `status` and set a message containing `fragment`.
#define EXPECT_FL_ERR(call, status, fragment)                                              \
  do {                                                                                     \
    fl_status_t st_ = (call);                                                              \
    EXPECT_EQ(st_, status) << #call << " returned " << fl_status_name(st_) << ": "         \
                           << fl_last_error_message();                                     \
    EXPECT_NE(std::string(fl_last_error_message()).find(fragment), std::string::npos)      \
        << "message was: " << fl_last_error_message();                                     \
  } while (0)

#define ASSERT_FL_OK(call)                                                                 \
  do {                                                                                     \
    fl_status_t st_ = (call);                                                              \
    ASSERT_EQ(st_, FL_OK) << #call << " returned " << fl_status_name(st_) << ": "          \
                          << fl_last_error_message();                                      \
  } while (0)

#define EXPECT_FL_OK(call)                                                                 \
  do {                                                                                     \
    fl_status_t st_ = (call);                                                              \
    EXPECT_EQ(st_, FL_OK) << #call << " returned " << fl_status_name(st_) << ": "          \
                          << fl_last_error_message();                                      \
  } while (0)

// An engine that is destroyed at scope exit.
struct EngineFixture {
  fl_engine_t* engine = nullptr;
  explicit EngineFixture(uint64_t workers = 2, uint64_t lanes = 0, uint64_t window = 0) {
    fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
    d.num_workers = workers;
    d.max_lanes = lanes;
    d.inflight_limit = window;
    if (fl_engine_create(&d, &engine) != FL_OK) ADD_FAILURE() << fl_last_error_message();
  }
  ~EngineFixture() {
    if (engine) fl_engine_destroy(engine);
  }
  fl_stream_t* host(uint32_t lane) const {
    fl_stream_t* s = nullptr;
    fl_device_t cpu{FL_DEVICE_CPU, 0};
    if (fl_stream_get(engine, lane, cpu, FL_STREAM_HOST, &s) != FL_OK) ADD_FAILURE() << fl_last_error_message();
    return s;
  }
};
