"""A model split over a package: its files import each other relatively."""
