// The optional component rules_file, found with find_package(limitcounter COMPONENTS
// rules_file) and linked as limitcounter::rules_file: reads a rule set from YAML and prints
// how many rules it has ("rules_from_yaml: 1 rule").
#include <iostream>

#include <limitcounter/rules_file.hpp>

int main() {
  const limitcounter::RuleSet rules = limitcounter::rules_from_yaml(
      "format: 1\nrules:\n  - name: merchant-day\n    where: [merchant]\n    per: day\n"
      "    max_amount: 1000\n");
  std::cout << "rules_from_yaml: " << rules.rules().size() << " rule\n";
  return rules.rules().size() == 1 && rules.rules()[0].max_amount() == 1000 ? 0 : 1;
}
