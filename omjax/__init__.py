"""omjax: small LLMs as cooperative multi-agent policies over symbolic option menus, in JAX."""

__version__ = "0.1.0"
