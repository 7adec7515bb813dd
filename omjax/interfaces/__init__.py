"""Action interfaces of the §6.1 ablations, beside the option menu of `omjax.options`.

* `native`: the LLM picks one primitive action letter per env step (Ablations A and C).
* `compound_json`: the LLM writes `{"action": ..., "args": ...}` freely; it is executed when it
  names a real option instance, and invalid or no-op emissions are counted (Ablation D).
"""
