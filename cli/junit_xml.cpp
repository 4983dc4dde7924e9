#include "cli/junit_xml.hpp"

#include <unistd.h>

#include <array>
#include <cstdlib>
#include <ctime>

#include <fmt/format.h>

namespace strata::cli {

namespace {

int64_t failure_count(const JunitSuite& suite) {
  int64_t failures = 0;
  for (const JunitCase& c : suite.cases) failures += c.failure ? 1 : 0;
  return failures;
}

std::string attribute(const std::string& text) { return xml_escape(text, true); }

}  // namespace

std::string xml_escape(const std::string& text, bool in_attribute) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      case '\n':
        out += in_attribute ? "&#10;" : "\n";
        break;
      case '\r':
        out += "&#13;";
        break;
      case '\t':
        out += in_attribute ? "&#9;" : "\t";
        break;
      default:
        // Bytes >= 0x80 are UTF-8 and pass through; other controls are not XML 1.0 characters.
        if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
  }
  return out;
}

JunitRun junit_run_here() {
  JunitRun run;
  std::time_t now = std::time(nullptr);
  if (const char* epoch = std::getenv("SOURCE_DATE_EPOCH"); epoch != nullptr && *epoch != 0) {
    char* end = nullptr;
    const long long seconds = std::strtoll(epoch, &end, 10);
    if (*end == 0 && seconds >= 0) now = static_cast<std::time_t>(seconds);
  }
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::array<char, 32> text{};
  std::strftime(text.data(), text.size(), "%Y-%m-%dT%H:%M:%S", &utc);
  run.timestamp = text.data();
  std::array<char, 256> host{};
  run.hostname = gethostname(host.data(), host.size() - 1) == 0 && host[0] != 0
                     ? std::string(host.data())
                     : std::string("localhost");
  return run;
}

std::string junit_xml(const std::vector<JunitSuite>& suites, const JunitRun& run) {
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<testsuites>\n";
  for (size_t id = 0; id < suites.size(); ++id) {
    const JunitSuite& suite = suites[id];
    out += fmt::format(
        "  <testsuite name=\"{}\" timestamp=\"{}\" hostname=\"{}\" id=\"{}\" package=\"{}\" "
        "tests=\"{}\" failures=\"{}\" errors=\"0\" time=\"0\">\n",
        attribute(suite.name), run.timestamp, attribute(run.hostname), id, attribute(suite.package),
        suite.cases.size(), failure_count(suite));
    out += "    <properties>\n";
    for (const auto& [key, value] : suite.properties) {
      out += fmt::format("      <property name=\"{}\" value=\"{}\"/>\n", attribute(key),
                         attribute(value));
    }
    out += "    </properties>\n";
    for (const JunitCase& c : suite.cases) {
      const std::string open = fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"0\"",
                                           attribute(c.classname), attribute(c.name));
      if (!c.failure) {
        out += open + "/>\n";
        continue;
      }
      out += open + ">\n";
      out += fmt::format("      <failure message=\"{}\" type=\"{}\">{}</failure>\n",
                         attribute(c.failure->message), attribute(c.failure->type),
                         xml_escape(c.failure->text, false));
      out += "    </testcase>\n";
    }
    out += fmt::format("    <system-out>{}</system-out>\n", xml_escape(suite.system_out, false));
    out += "    <system-err/>\n";
    out += "  </testsuite>\n";
  }
  out += "</testsuites>\n";
  return out;
}

}  // namespace strata::cli
