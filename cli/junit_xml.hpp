#pragma once
// JUnit XML, the test report format CI systems display (Jenkins, GitLab, GitHub Actions
// reporters): the Apache Ant JUnit task's format, which validates against both Ant's strict
// schema (tests/cli/data/junit-ant.xsd) and Jenkins' (tests/cli/data/junit.xsd):
//   <testsuites>
//     <testsuite name timestamp hostname id package tests failures errors time>
//       <properties><property name value/>...</properties>
//       <testcase classname name time><failure message type>text</failure></testcase>...
//       <system-out>text</system-out><system-err/>
//     </testsuite>...
//   </testsuites>
// Times are written as 0. The timestamp is the run's, or SOURCE_DATE_EPOCH's when set (the
// reproducible-builds convention), so that the same inputs give the same bytes there.

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace strata::cli {

struct JunitFailure {
  std::string message;  // one line
  std::string type;
  std::string text;  // the details, any number of lines
};

struct JunitCase {
  std::string classname;
  std::string name;
  std::optional<JunitFailure> failure;
};

struct JunitSuite {
  std::string name;
  std::string package;                                          // what ran it, e.g. "strata check"
  std::vector<std::pair<std::string, std::string>> properties;  // name, value
  std::vector<JunitCase> cases;
  std::string system_out;
};

// Where and when the suites ran, as Ant's testsuite records it.
struct JunitRun {
  std::string timestamp;  // ISO 8601 without a zone, UTC: "2026-11-27T04:20:00"
  std::string hostname;
};
// This machine's host name, and now (or SOURCE_DATE_EPOCH when the environment sets it).
JunitRun junit_run_here();

// The whole document, from the XML declaration to the last newline.
std::string junit_xml(const std::vector<JunitSuite>& suites, const JunitRun& run);

// `text` with &, <, >, " and ' escaped and the characters XML 1.0 cannot hold (controls other
// than tab, newline and carriage return) dropped; in attributes newlines and tabs are escaped too.
std::string xml_escape(const std::string& text, bool attribute);

}  // namespace strata::cli
