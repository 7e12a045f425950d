"""Label sync: keep this Node's owned labels and topology annotation equal to discovery's."""
