"""The contracts: what users and plug-ins write against (the Channel and controller APIs,
`Record`, `Member`, `Budget`) and what the records look like. They import nothing of ours."""
