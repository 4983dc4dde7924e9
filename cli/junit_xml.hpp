#pragma once
// JUnit XML, the test report format CI systems display (Jenkins, GitLab, GitHub Actions
// reporters): the Apache Ant JUnit task's format, as tests/cli/data/junit.xsd states it:
//   <testsuites name tests failures errors>
//     <testsuite name id package tests failures errors skipped time>
//       <properties><property name value/>...</properties>
//       <testcase classname name time><failure message type>text</failure></testcase>...
//       <system-out>text</system-out><system-err/>
//     </testsuite>...
//   </testsuites>
// Times are written as 0: the report is the same bytes for the same inputs (no clock, no host
// name, no timestamp).

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
  std::vector<std::pair<std::string, std::string>> properties;  // name, value
  std::vector<JunitCase> cases;
  std::string system_out;
};

// The whole document, from the XML declaration to the last newline.
std::string junit_xml(const std::string& name, const std::vector<JunitSuite>& suites);

// `text` with &, <, >, " and ' escaped and the characters XML 1.0 cannot hold (controls other
// than tab, newline and carriage return) dropped; in attributes newlines and tabs are escaped too.
std::string xml_escape(const std::string& text, bool attribute);

}  // namespace strata::cli
